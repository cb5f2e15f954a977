package kvlease

import (
	"math"
	"runtime/metrics"
	"testing"
)

func TestHistogramQuantile(t *testing.T) {
	inf := math.Inf(1)
	for _, c := range []struct {
		name    string
		buckets []float64
		counts  []uint64
		q       float64
		want    float64
		ok      bool
	}{
		{"empty", []float64{0, 1, 2}, []uint64{0, 0}, 0.99, 0, false},
		{"all in one bucket", []float64{0, 1e-4, 1e-3}, []uint64{0, 5}, 0.99, 1e-3, true},
		{"p99 in the tail", []float64{0, 1e-4, 1e-3, 1e-2}, []uint64{98, 1, 1}, 0.99, 1e-3, true},
		{"p99 past 99 of 100", []float64{0, 1e-4, 1e-3, 1e-2}, []uint64{99, 0, 1}, 0.99, 1e-4, true},
		{"p100 in the last bucket", []float64{0, 1e-4, 1e-3, 1e-2}, []uint64{99, 0, 1}, 1, 1e-2, true},
		{"unbounded last bucket: its lower bound", []float64{0, 1e-4, inf}, []uint64{1, 99}, 0.99, 1e-4, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := histogramQuantile(&metrics.Float64Histogram{Buckets: c.buckets, Counts: c.counts}, c.q)
			if got != c.want || ok != c.ok {
				t.Errorf("histogramQuantile = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}
