package fence_test

import (
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

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
	if n := telemetrytest.Sum(t, reader, "leased.fence.rejections"); n != 1 {
		t.Fatalf("fence rejections %d, want 1", n)
	}
}
