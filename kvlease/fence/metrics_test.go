package fence_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/telemetry"
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

// A fence counts its rejections.
func TestRejectionsCounted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	m, err := telemetry.NewMetrics(mp)
	if err != nil {
		t.Fatal(err)
	}
	f := fence.Mem{Metrics: m}
	_ = f.Do("r", 5, nil)
	_ = f.Do("r", 4, nil)
	if n := sumOf(t, reader, "leased.fence.rejections"); n != 1 {
		t.Fatalf("fence rejections %d, want 1", n)
	}
}
