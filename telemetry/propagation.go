package telemetry

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderCarrier adapts NATS message headers to a TextMapCarrier. NATS headers
// are case-sensitive and are kept as the propagator writes them: W3C
// `traceparent` and `tracestate` in lower case, so non-Go clients interoperate.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value for key, whose name is matched without
// regard to case (a client that sent `Traceparent` started a trace of its
// own; found by an outside client).
func (c HeaderCarrier) Get(key string) string { return HeaderValue(nats.Header(c), key) }

// HeaderValue is h's first value for name, matched exactly or else without
// regard to case: NATS header names are case-sensitive, and leased's
// protocol (docs/api.md) matches its headers as HTTP does.
func HeaderValue(h nats.Header, name string) string {
	v, _ := LookupHeader(h, name)
	return v
}

// LookupHeader is HeaderValue, and whether h has the header at all: one
// sent with an empty value is there, its value "".
func LookupHeader(h nats.Header, name string) (string, bool) {
	if vs := h[name]; len(vs) > 0 {
		return vs[0], true
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0], true
		}
	}
	return "", false
}

// Set sets key to value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Propagator is the W3C trace-context and baggage propagator leased uses on
// the wire, whatever the global one is.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(
	propagation.TraceContext{}, propagation.Baggage{})

// Inject writes ctx's trace context into h (allocating it if nil) and
// returns h.
func Inject(ctx context.Context, h nats.Header) nats.Header {
	if h == nil {
		h = nats.Header{}
	}
	Propagator.Inject(ctx, HeaderCarrier(h))
	return h
}

// Extract returns ctx with the trace context found in h.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return Propagator.Extract(ctx, HeaderCarrier(h))
}
