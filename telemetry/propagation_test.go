package telemetry_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/telemetry"
)

// A caller's trace context is continued whatever the case of its header
// names: docs/api.md matches headers without regard to case, and a client
// that sent `Traceparent` started a trace of its own (found by an outside
// client).
func TestExtractMatchesHeaderNamesInAnyCase(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, name := range []string{"traceparent", "Traceparent", "TRACEPARENT"} {
		sc := trace.SpanContextFromContext(telemetry.Extract(context.Background(), nats.Header{name: {parent}}))
		if got := sc.TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" || !sc.IsRemote() {
			t.Errorf("header %q: extracted trace %q (remote %v), want the caller's", name, got, sc.IsRemote())
		}
	}
	if v := telemetry.HeaderValue(nats.Header{"traceparent": {"exact"}, "TraceParent": {"folded"}}, "traceparent"); v != "exact" {
		t.Errorf("HeaderValue preferred %q to the exact name's value", v)
	}
}
