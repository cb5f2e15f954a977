package telemetry

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/leased/leased/telemetry/telemetrytest"
)

// series counts the data points (one per attribute set) of each metric.
func series(t *testing.T, r *sdkmetric.ManualReader) map[string]int {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				out[m.Name] = len(d.DataPoints)
			case metricdata.Histogram[float64]:
				out[m.Name] = len(d.DataPoints)
			case metricdata.Gauge[float64]:
				out[m.Name] = len(d.DataPoints)
			case metricdata.Gauge[int64]:
				out[m.Name] = len(d.DataPoints)
			}
		}
	}
	return out
}

// The number of series does not grow with the number of leases, fenced
// resources or request subjects; lease names are labels only for the
// prefixes asked for.
func TestSeriesIndependentOfLeases(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), WithLeaseNamePrefixes("elect."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10_000 {
		m.OwnershipChanged(ctx, fmt.Sprintf("job.%d", i), false)
		m.StaleTokenRejected(ctx, fmt.Sprintf("row-%d", i))
		m.Request(ctx, "grant", "ok", 0)
		m.LeaseEvent(ctx, "granted")
	}
	m.OwnershipChanged(ctx, "elect.leader", false)
	got := series(t, reader)
	for name, want := range map[string]int{
		"leased.ownership.changes": 2, // the unnamed series and elect.leader
		"leased.fence.rejections":  1,
		"leased.requests":          1,
		"leased.request.duration":  1,
		"leased.lease.events":      1,
	} {
		if got[name] != want {
			t.Errorf("%s: %d series after 10,000 leases, want %d", name, got[name], want)
		}
	}
	if _, err := NewMetrics(nil, WithLeaseNamePrefixes("")); err == nil {
		t.Error("an empty lease name prefix was accepted")
	}
	if _, err := NewMetrics(nil, nil); err == nil {
		t.Error("a nil option was accepted")
	}
}

// Names under the asked-for prefixes get series of their own up to
// MaxNamedLeases; the leases past it are counted without their name,
// still by whether they flap. Past the SDK's own limit of 2,000 series,
// every new series went to one overflow series without the flapping
// label.
func TestNamedSeriesBounded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), WithLeaseNamePrefixes("job."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const leases = 2_500
	for i := range leases { // each name flapping and not: two series each
		m.OwnershipChanged(ctx, fmt.Sprintf("job.%d", i), false)
		m.OwnershipChanged(ctx, fmt.Sprintf("job.%d", i), true)
	}
	m.OwnershipChanged(ctx, "job.0", true) // named: still its own series
	named, total := 0, int64(0)
	sum, _ := telemetrytest.Metric(t, reader, "leased.ownership.changes").(metricdata.Sum[int64])
	for _, dp := range sum.DataPoints {
		total += dp.Value
		if _, ok := dp.Attributes.Value(AttrFlapping); !ok {
			t.Fatalf("a series without %s: %v", AttrFlapping, dp.Attributes.ToSlice())
		}
		if v, ok := dp.Attributes.Value(AttrName); ok {
			named++
			if f, _ := dp.Attributes.Value(AttrFlapping); v.AsString() == "job.0" && f.AsBool() && dp.Value != 2 {
				t.Errorf("job.0 flapping counted %d, want 2", dp.Value)
			}
		}
	}
	if named != 2*MaxNamedLeases || total != 2*leases+1 {
		t.Errorf("%d named series and %d changes counted, want %d and %d", named, total, 2*MaxNamedLeases, 2*leases+1)
	}
}

// leased.clock.margin is the offset estimate's error bound, as the README's
// metrics table and client.WithMeterProvider say, and its description says
// so: it said "the margin the clock offset must stay within", which invites
// an alert on offset > margin that fires on any offset larger than half a
// round trip and means nothing for safety.
func TestClockMarginIsTheOffsetsErrorBound(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	m, err := NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	m.ClockOffset(context.Background(), "grantor", 3*time.Millisecond, 750*time.Microsecond)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, x := range sm.Metrics {
			if x.Name != MetricClockMargin {
				continue
			}
			if d := strings.ToLower(x.Description); !strings.Contains(d, "error bound") || strings.Contains(d, "must stay within") {
				t.Errorf("%s is described as %q: want the offset estimate's error bound", x.Name, x.Description)
			}
			if g, ok := x.Data.(metricdata.Gauge[float64]); !ok || len(g.DataPoints) != 1 || g.DataPoints[0].Value != 0.00075 {
				t.Errorf("%s = %+v, want the bound 0.00075 s", x.Name, x.Data)
			}
			return
		}
	}
	t.Fatalf("no %s recorded", MetricClockMargin)
}
