// Package telemetrytest reads what a test's meter provider recorded: the
// data of one metric from an OpenTelemetry SDK manual reader. It guarantees
// nothing about metrics it was not asked for, and sets up no provider.
package telemetrytest

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Metric collects from r and returns the data of the metric called name,
// or nil if r has none by that name.
func Metric(tb testing.TB, r *sdkmetric.ManualReader, name string) metricdata.Aggregation {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
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

// Sum returns the total over all data points of the int64 sum called
// name, 0 if there is no such sum.
func Sum(tb testing.TB, r *sdkmetric.ManualReader, name string) int64 {
	tb.Helper()
	s, ok := Metric(tb, r, name).(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range s.DataPoints {
		n += dp.Value
	}
	return n
}

// Histogram returns, for the int64 histogram called name, its count and
// sum per value of the attribute key (over all data points with that
// value; "" for points without it). It is empty if there is no such
// histogram.
func Histogram(tb testing.TB, r *sdkmetric.ManualReader, name string, key attribute.Key) map[string]HistogramTotal {
	tb.Helper()
	out := map[string]HistogramTotal{}
	h, ok := Metric(tb, r, name).(metricdata.Histogram[int64])
	if !ok {
		return out
	}
	for _, dp := range h.DataPoints {
		v, _ := dp.Attributes.Value(key)
		t := out[v.Emit()]
		t.Count += dp.Count
		t.Sum += dp.Sum
		out[v.Emit()] = t
	}
	return out
}

// HistogramTotal is a histogram's count and sum.
type HistogramTotal struct {
	Count uint64
	Sum   int64
}
