package kvlease_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// collect returns the data points of the named metric.
func collect(t *testing.T, r *sdkmetric.ManualReader, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	return nil
}

func sumOf(t *testing.T, r *sdkmetric.ManualReader, name string) int64 {
	t.Helper()
	s, ok := collect(t, r, name).(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

// The keeper records renewal latency and failures, and checks after the
// deadline ("expiries during work").
func TestMetricsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "m", 3*time.Second)
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithMeterProvider(mp))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2500 * time.Millisecond) // two renewals, at 1 s and 2 s
		synctest.Wait()
		h, ok := collect(t, reader, "leased.renewal.duration").(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 2 {
			t.Fatalf("renewal latency: %+v", h)
		}
		g.SetMode(kvleasetest.FakeRefuse)
		time.Sleep(time.Second) // the next renewal is refused
		synctest.Wait()
		if n := sumOf(t, reader, "leased.renewal.failures"); n != 1 {
			t.Fatalf("renewal failures %d, want 1", n)
		}
		<-k.Done()
		time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
		_ = l.Check() // an effect attempted after the deadline
		if n := sumOf(t, reader, "leased.expiries_during_work"); n != 1 {
			t.Fatalf("expiries during work %d, want 1", n)
		}

	})
}
