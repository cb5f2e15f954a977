package telemetry

import (
	"context"
	"crypto/rand"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Unsampled returns a TracerProvider whose spans are recorded nowhere and
// carry a span context that says "not sampled", so that the spans started
// under them (the store's, with the SDK's default parent-based sampler)
// are not recorded either. It is for work too frequent to be worth a
// trace: the grantor's observer renews its own lease every 1.7 s, two
// spans each, some 100,000 a day per node that buried the leases' traces
// in Jaeger (found by an outside client). A no-op provider would not do:
// its spans carry no span context, and the store's would start traces of
// their own.
func Unsampled() trace.TracerProvider { return unsampledProvider{} }

type unsampledProvider struct{ embedded.TracerProvider }

func (unsampledProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return unsampledTracer{} }

type unsampledTracer struct{ embedded.Tracer }

func (unsampledTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.SpanContextConfig{TraceID: trace.SpanContextFromContext(ctx).TraceID()}
	if !cfg.TraceID.IsValid() {
		_, _ = rand.Read(cfg.TraceID[:])
	}
	_, _ = rand.Read(cfg.SpanID[:])
	ctx = trace.ContextWithSpanContext(ctx, trace.NewSpanContext(cfg)) // TraceFlags 0: not sampled
	return ctx, trace.SpanFromContext(ctx)
}
