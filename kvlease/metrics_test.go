package kvlease_test

import (
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry/telemetrytest"
)

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
		h, ok := telemetrytest.Metric(t, reader, "leased.renewal.duration").(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 || h.DataPoints[0].Count != 2 {
			t.Fatalf("renewal latency: %+v", h)
		}
		g.SetMode(kvleasetest.FakeRefuse)
		time.Sleep(time.Second) // the next renewal is refused
		synctest.Wait()
		if n := telemetrytest.Sum(t, reader, "leased.renewal.failures"); n != 1 {
			t.Fatalf("renewal failures %d, want 1", n)
		}
		<-k.Done()
		time.Sleep(time.Until(l.Deadline()) + time.Millisecond)
		_ = l.Check() // an effect attempted after the deadline
		if n := telemetrytest.Sum(t, reader, "leased.expiries_during_work"); n != 1 {
			t.Fatalf("expiries during work %d, want 1", n)
		}

	})
}
