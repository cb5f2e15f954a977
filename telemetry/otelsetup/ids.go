package otelsetup

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// idProvider is the tracer provider Setup installs when no span is
// exported. Its spans record nothing (nothing would receive them) but
// carry the span contexts the SDK's default provider would give them:
// new IDs, the parent's trace, and its sampling decision
// (ParentBased(AlwaysSample)): a grant's traceparent stored in its
// record, and everything that links to it, is as with the SDK. The SDK
// records every span whether or not a processor will see it; on a loaded
// grantor that was about 5% of its CPU and a third of what it allocated.
type idProvider struct{ noop.TracerProvider }

func (p idProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return idTracer{p: p} }

type idTracer struct {
	noop.Tracer
	p idProvider
}

// Start returns a non-recording span with a span context made as the SDK
// makes it.
func (t idTracer) Start(ctx context.Context, _ string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if ctx == nil {
		ctx = context.Background()
	}
	var psc trace.SpanContext
	if cfg := trace.NewSpanStartConfig(opts...); !cfg.NewRoot() {
		psc = trace.SpanContextFromContext(ctx)
	}
	scc := trace.SpanContextConfig{TraceID: psc.TraceID(), SpanID: newSpanID()}
	for !scc.TraceID.IsValid() {
		binary.BigEndian.PutUint64(scc.TraceID[:8], rand.Uint64())
		binary.BigEndian.PutUint64(scc.TraceID[8:], rand.Uint64())
	}
	// ParentBased(AlwaysSample): a valid parent's decision, else sampled;
	// the trace state is the parent's.
	if !psc.IsValid() || psc.IsSampled() {
		scc.TraceFlags = psc.TraceFlags() | trace.FlagsSampled
	} else {
		scc.TraceFlags = psc.TraceFlags() &^ trace.FlagsSampled
	}
	if psc.IsValid() {
		scc.TraceState = psc.TraceState()
	}
	span := idSpan{sc: trace.NewSpanContext(scc), p: t.p}
	return trace.ContextWithSpan(ctx, span), span
}

func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// idSpan is a span that records nothing and has a span context.
type idSpan struct {
	noop.Span
	sc trace.SpanContext
	p  idProvider
}

func (s idSpan) SpanContext() trace.SpanContext       { return s.sc }
func (s idSpan) TracerProvider() trace.TracerProvider { return s.p }
