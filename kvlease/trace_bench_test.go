package kvlease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// discard is a span exporter that drops everything: the benchmark measures
// the cost of making and batching spans, not of a collector.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkTracingOverhead compares grant+renew with tracing on (SDK, batch
// processor, discarding exporter) and off, interleaved in one loop on one
// server; it reports both rates and overhead = on/off time (target ≤ 1.15).
//
//	go test -run '^$' -bench TracingOverhead -benchtime 2000x ./kvlease/
func BenchmarkTracingOverhead(b *testing.B) {
	b.Run("sync=always", func(b *testing.B) { tracingOverhead(b) })
	// Without fsync the CPU cost of spans is a larger share.
	b.Run("sync=unsafe", func(b *testing.B) { tracingOverhead(b, kvleasetest.WithUnsafeSync()) })
}

func tracingOverhead(b *testing.B, opts ...kvleasetest.ServerOption) {
	srv := kvleasetest.NewServer(b, opts...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	on := kvleasetest.OpenStore(b, srv.ClientURL(), kvlease.WithTracerProvider(tp))
	off := kvleasetest.OpenStore(b, srv.ClientURL(), kvlease.WithTracerProvider(noop.NewTracerProvider()))
	ctx := context.Background()
	op := func(st *kvlease.Store, name string) {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: 10 * time.Second})
		if err == nil {
			_, err = st.Renew(ctx, kvlease.RenewRequest{Name: name, Holder: "h", Token: rec.Token, Revision: rec.Revision})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	var tOn, tOff time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		op(off, fmt.Sprintf("off.%d", i))
		tOff += time.Since(start)
		start = time.Now()
		op(on, fmt.Sprintf("on.%d", i))
		tOn += time.Since(start)
	}
	b.ReportMetric(float64(b.N)/tOff.Seconds(), "off-ops/s")
	b.ReportMetric(float64(b.N)/tOn.Seconds(), "on-ops/s")
	b.ReportMetric(tOn.Seconds()/tOff.Seconds(), "overhead")
	b.ReportMetric(0, "ns/op")
}
