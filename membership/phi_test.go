package membership

import (
	"math"
	"testing"
	"time"
)

func near(got, want, tol float64) bool {
	if math.IsInf(want, 0) || math.IsNaN(want) {
		return got == want || (math.IsNaN(got) && math.IsNaN(want))
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

func TestPhi(t *testing.T) {
	// Reference values: −log10(erfc(z/√2)/2) computed with mpmath at 30 digits.
	tests := []struct {
		name                  string
		elapsed, mean, stddev float64
		want                  float64
	}{
		{"at the mean", 1, 1, 0.25, 0.30102999566398120},
		{"one sigma early", 0.75, 1, 0.25, 0.07502601295781802},
		{"three sigma early", 0.25, 1, 0.25, 0.00058664931379007},
		{"one sigma late", 1.25, 1, 0.25, 0.79954554149197040},
		{"two sigma late", 1.5, 1, 0.25, 1.64301608014093680},
		{"three sigma late", 1.75, 1, 0.25, 2.86969903592936860},
		{"threshold 8 is about 5.612 sigma", 5.612, 0, 1, 7.999996876659292},
		{"ten sigma", 10, 0, 1, 23.118053405486073},
		{"switch to the asymptotic form", 20 * math.Sqrt2, 0, 1, 175.56896887098435},
		{"asymptotic, 30 sigma", 30, 0, 1, 197.309209261661},
		{"asymptotic, 40 sigma", 40, 0, 1, 349.437006459346},
		{"asymptotic, 100 sigma", 100, 0, 1, 2173.87154286903},
		{"far early is zero", -1000, 0, 1, 0},
		{"zero stddev before the mean", 0.5, 1, 0, 0},
		{"zero stddev after the mean", 1.5, 1, 0, math.Inf(1)},
		{"negative stddev", 1.5, 1, -1, math.Inf(1)},
		{"NaN elapsed", math.NaN(), 1, 1, 0},
		{"NaN stddev", 1, 1, math.NaN(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := phi(tt.elapsed, tt.mean, tt.stddev); !near(got, tt.want, 1e-9) {
				t.Errorf("phi(%g, %g, %g) = %.15g, want %.15g", tt.elapsed, tt.mean, tt.stddev, got, tt.want)
			}
		})
	}
}

func TestPhiIsMonotonicAcrossTheSwitch(t *testing.T) {
	prev := -1.0
	for z := 0.0; z < 60; z += 0.01 {
		got := phi(z, 0, 1)
		if got < prev || math.IsInf(got, 0) || math.IsNaN(got) {
			t.Fatalf("phi(%g) = %g after %g", z, got, prev)
		}
		prev = got
	}
}

func TestWindowStats(t *testing.T) {
	tests := []struct {
		name         string
		samples      []float64
		mean, stddev float64
		n            int
	}{
		{"empty", nil, 0, 0, 0},
		{"one", []float64{0.5}, 0.5, 0, 1},
		{"constant", []float64{1, 1, 1, 1}, 1, 0, 4},
		{"population stddev", []float64{2, 4, 4, 4, 5, 5, 7, 9}, 5, 2, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var w window
			for _, x := range tt.samples {
				w.add(x)
			}
			mean, sd, n := w.stats()
			if n != tt.n || !near(mean, tt.mean, 1e-12) || !near(sd, tt.stddev, 1e-12) {
				t.Errorf("stats = (%g, %g, %d), want (%g, %g, %d)", mean, sd, n, tt.mean, tt.stddev, tt.n)
			}
		})
	}
}

func TestWindowKeepsTheLastSamples(t *testing.T) {
	var w window
	for range windowSize {
		w.add(10) // evicted below
	}
	for i := range windowSize {
		w.add(float64(i % 2)) // 0, 1, 0, 1 …
	}
	mean, sd, n := w.stats()
	if n != windowSize || !near(mean, 0.5, 1e-12) || !near(sd, 0.5, 1e-12) {
		t.Errorf("stats = (%g, %g, %d), want (0.5, 0.5, %d)", mean, sd, n, windowSize)
	}
	w.reset()
	if _, _, n := w.stats(); n != 0 {
		t.Errorf("after reset n = %d", n)
	}
}

func TestEstimate(t *testing.T) {
	tests := []struct {
		name              string
		mean, stddev      float64
		n                 int
		heard             bool
		nominal, minStd   float64
		wantMean, wantStd float64
	}{
		{"first heartbeat: acceptable pause", 0, 0, 0, false, 0.1, 0.05, 0.1, 0.2},
		{"first heartbeat: floor", 0, 0, 0, false, 0.01, 0.05, 0.01, 0.05},
		{"few samples: nominal, regular", 0.3, 0.2, minSamples - 1, true, 0.1, 0.01, 0.1, 0.025},
		{"few samples: floor", 0, 0, 0, true, 0.1, 0.05, 0.1, 0.05},
		{"regular sender: mean/4 floor", 0.1, 0.001, minSamples, true, 0.1, 0.01, 0.1, 0.025},
		{"regular sender: minimum floor", 0.1, 0.001, 100, true, 0.1, 0.05, 0.1, 0.05},
		{"jittery sender: observed stddev", 0.1, 0.08, 100, true, 0.1, 0.05, 0.1, 0.08},
		{"observed mean, not the nominal one", 0.5, 0.2, 100, true, 0.1, 0.05, 0.5, 0.2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, s := estimate(tt.mean, tt.stddev, tt.n, tt.heard, tt.nominal, tt.minStd)
			if !near(m, tt.wantMean, 1e-12) || !near(s, tt.wantStd, 1e-12) {
				t.Errorf("estimate = (%g, %g), want (%g, %g)", m, s, tt.wantMean, tt.wantStd)
			}
		})
	}
}

func TestDiscount(t *testing.T) {
	tests := []struct {
		level  float64
		health int
		want   float64
	}{
		{8, 0, 8},
		{8, -1, 8},
		{8, 1, 4},
		{8, 7, 1},
		{MaxSuspicion, 3, MaxSuspicion / 4},
	}
	for _, tt := range tests {
		if got := discount(tt.level, tt.health); got != tt.want {
			t.Errorf("discount(%g, %d) = %g, want %g", tt.level, tt.health, got, tt.want)
		}
	}
}

// TestDetectorSuspicion pins down when a silent member crosses the default
// threshold: the timings documented in the package documentation.
func TestDetectorSuspicion(t *testing.T) {
	steady := func(interval time.Duration, k int) *window {
		var w window
		for range k {
			w.add(interval.Seconds())
		}
		return &w
	}
	jittery := func() *window { // mean 100 ms, stddev 80 ms
		var w window
		for range 25 {
			w.add(0.02)
			w.add(0.18)
		}
		return &w
	}
	ms := time.Millisecond
	tests := []struct {
		name             string
		w                *window
		heard            bool
		nominal, minStd  time.Duration
		below, atOrAbove time.Duration // silence below / at or above threshold 8
	}{
		// 100 + 5.612·50 ms = 380.6 ms
		{"test profile, steady", steady(100*ms, 50), true, 100 * ms, 50 * ms, 380 * ms, 381 * ms},
		{"test profile, few samples", steady(100*ms, minSamples-1), true, 100 * ms, 50 * ms, 380 * ms, 381 * ms},
		// 500 + 5.612·125 ms = 1201.5 ms
		{"LAN profile, steady", steady(500*ms, 50), true, 500 * ms, 100 * ms, 1201 * ms, 1202 * ms},
		{"LAN profile, few samples", &window{}, true, 500 * ms, 100 * ms, 1201 * ms, 1202 * ms},
		// before the first heartbeat: 100 + 5.612·200 ms = 1222.4 ms
		{"test profile, first heartbeat", &window{}, false, 100 * ms, 50 * ms, 1222 * ms, 1223 * ms},
		// before the first heartbeat: 500 + 5.612·1000 ms = 6112 ms
		{"LAN profile, first heartbeat", &window{}, false, 500 * ms, 100 * ms, 6111 * ms, 6113 * ms},
		// jittery: 100 + 5.612·80 = 549 ms
		{"jittery sender", jittery(), true, 100 * ms, 50 * ms, 548 * ms, 550 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := detectorSuspicion(tt.w, tt.heard, tt.below, tt.nominal, tt.minStd); got >= DefaultPhiThreshold {
				t.Errorf("after %v: %g, want < %g", tt.below, got, DefaultPhiThreshold)
			}
			if got := detectorSuspicion(tt.w, tt.heard, tt.atOrAbove, tt.nominal, tt.minStd); got < DefaultPhiThreshold {
				t.Errorf("after %v: %g, want ≥ %g", tt.atOrAbove, got, DefaultPhiThreshold)
			}
		})
	}
	t.Run("capped below MaxSuspicion", func(t *testing.T) {
		got := detectorSuspicion(steady(100*ms, 50), true, time.Hour, 100*ms, 50*ms)
		if got != detectorCap || got >= MaxSuspicion {
			t.Errorf("after an hour: %g, want %g", got, float64(detectorCap))
		}
	})
}

func TestClockOffset(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		remote time.Time
		now    time.Time
		rtt    time.Duration
		want   time.Duration
	}{
		{"same clock", t0.Add(-5 * time.Millisecond), t0, 10 * time.Millisecond, 0},
		{"remote ahead", t0.Add(2 * time.Second), t0, 10 * time.Millisecond, 2*time.Second + 5*time.Millisecond},
		{"remote behind", t0.Add(-time.Second), t0, 0, -time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clockOffset(tt.remote, tt.now, tt.rtt); got != tt.want {
				t.Errorf("clockOffset = %v, want %v", got, tt.want)
			}
		})
	}
}
