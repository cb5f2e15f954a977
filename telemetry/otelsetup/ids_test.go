package otelsetup

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The provider installed when no span is exported gives spans the span
// contexts the SDK's default provider gives them, less the IDs themselves.
func TestIDProviderMatchesSDK(t *testing.T) {
	sdk := sdktrace.NewTracerProvider()
	defer func() { _ = sdk.Shutdown(context.Background()) }()
	ts, _ := trace.ParseTraceState("k=v")
	parent := func(flags trace.TraceFlags, remote bool) context.Context {
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: flags, TraceState: ts, Remote: remote}))
	}
	cases := map[string]struct {
		ctx  context.Context
		opts []trace.SpanStartOption
	}{
		"root":                 {context.Background(), nil},
		"sampled remote":       {parent(trace.FlagsSampled, true), nil},
		"unsampled remote":     {parent(0, true), nil},
		"sampled local":        {parent(trace.FlagsSampled, false), nil},
		"unsampled local":      {parent(0, false), nil},
		"new root under one":   {parent(0, true), []trace.SpanStartOption{trace.WithNewRoot()}},
		"with kind and attrib": {parent(trace.FlagsSampled, true), []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer)}},
	}
	for name, c := range cases {
		_, ws := sdk.Tracer("x").Start(c.ctx, "op", c.opts...)
		want := ws.SpanContext()
		ctx, gs := idProvider{}.Tracer("x").Start(c.ctx, "op", c.opts...)
		got := gs.SpanContext()
		psc := trace.SpanContextFromContext(c.ctx)
		sameTrace := func(sc trace.SpanContext) bool { return sc.TraceID() == psc.TraceID() }
		switch {
		case !got.IsValid() || got.IsRemote():
			t.Fatalf("%s: span context %+v", name, got)
		case got.TraceFlags() != want.TraceFlags() || got.TraceState().String() != want.TraceState().String():
			t.Fatalf("%s: flags %v state %q, SDK %v %q", name, got.TraceFlags(), got.TraceState(), want.TraceFlags(), want.TraceState())
		case sameTrace(got) != sameTrace(want) || got.SpanID() == psc.SpanID():
			t.Fatalf("%s: trace %v span %v under %v; SDK trace %v", name, got.TraceID(), got.SpanID(), psc.TraceID(), want.TraceID())
		case gs.IsRecording():
			t.Fatalf("%s: recording", name)
		case !trace.SpanFromContext(ctx).SpanContext().Equal(got):
			t.Fatalf("%s: the context does not carry the span", name)
		}
		// A child of the span is in its trace, as with the SDK.
		_, child := idProvider{}.Tracer("x").Start(ctx, "child")
		if child.SpanContext().TraceID() != got.TraceID() || child.SpanContext().TraceFlags() != got.TraceFlags() {
			t.Fatalf("%s: child %+v of %+v", name, child.SpanContext(), got)
		}
		gs.End()
		ws.End()
	}
}
