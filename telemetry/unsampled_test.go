package telemetry_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leased/leased/telemetry"
)

// Spans started under an Unsampled span are not recorded by an SDK with
// its default sampler; under a no-op provider's they would be, each the
// root of a trace of its own.
func TestUnsampledSilencesWhatItCovers(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sdk := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	child := func(parent context.Context) {
		_, s := sdk.Tracer("store").Start(parent, "lease.renew")
		s.End()
	}
	ctx, span := telemetry.Unsampled().Tracer("holder").Start(context.Background(), "lease.holder.renew")
	child(ctx)
	span.End()
	if sc := span.SpanContext(); !sc.IsValid() || sc.IsSampled() || span.IsRecording() {
		t.Errorf("an unsampled span: valid %v, sampled %v, recording %v; want a valid span context, not sampled, not recording",
			sc.IsValid(), sc.IsSampled(), span.IsRecording())
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("%d spans recorded under an unsampled span, want 0", n)
	}
	ctx, span = noop.NewTracerProvider().Tracer("holder").Start(context.Background(), "lease.holder.renew")
	child(ctx)
	span.End()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans recorded under a no-op span, want 1 (the reason for Unsampled)", n)
	}
}
