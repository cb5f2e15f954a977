package kvlease_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
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

// A lease lost to its deadline is one renewal failure counted "expired",
// however the deadline came: an attempt in flight cut short by it (the
// grantor silent), or while the keeper waited to try again (the grantor
// failing fast, or the holder paused past it). The wait's was not counted,
// so a paused holder's loss counted "expired" or nothing, at random (found
// by an operator, leased run stopped with SIGSTOP).
func TestMetricsCountALossToTheDeadline(t *testing.T) {
	for name, mode := range map[string]kvleasetest.FakeMode{
		"silent": kvleasetest.FakeUnreachable, "failing fast": kvleasetest.FakeFailFast,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				reader := sdkmetric.NewManualReader()
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
				g := kvleasetest.NewFakeGrantor()
				l := mustAcquire(t, g, "m", 3*time.Second)
				k, err := kvlease.Keep(t.Context(), l, kvlease.WithMeterProvider(mp))
				if err != nil {
					t.Fatal(err)
				}
				g.SetMode(mode)
				<-k.Done()
				if !errors.Is(k.Err(), kvlease.ErrExpired) {
					t.Fatalf("keeper ended with %v, want a loss to the deadline", k.Err())
				}
				synctest.Wait()
				if n := failures(t, reader)["expired"]; n != 1 {
					t.Errorf("renewal failures %v, want one expired", failures(t, reader))
				}
			})
		})
	}
}

// failures is leased.renewal.failures by lease.outcome.
func failures(t *testing.T, reader *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	s, _ := telemetrytest.Metric(t, reader, "leased.renewal.failures").(metricdata.Sum[int64])
	for _, dp := range s.DataPoints {
		v, _ := dp.Attributes.Value(telemetry.AttrOutcome)
		out[v.AsString()] += dp.Value
	}
	return out
}
