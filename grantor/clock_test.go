package grantor

import (
	"math"
	"testing"
	"time"
)

func TestClockEstimator(t *testing.T) {
	base := time.Now()
	for _, c := range []struct {
		name     string
		offset   time.Duration // at the first sample
		drift    float64       // server runs fast by this rate
		rtt      time.Duration
		span     time.Duration
		wantRate float64
		exceeds  float64 // rho to test
		wantOver bool
	}{
		{"in step", 0, 0, time.Millisecond, time.Minute, 0, 1e-3, false},
		{"offset only", 3 * time.Second, 0, time.Millisecond, time.Minute, 0, 1e-3, false},
		{"slow drift", 0, 1e-5, time.Millisecond, time.Hour, 1e-5, 1e-3, false},
		{"fast drift", 0, 5e-3, time.Millisecond, time.Minute, 5e-3, 1e-3, true},
		{"drift hidden by rtt", 0, 2e-3, 200 * time.Millisecond, 10 * time.Second, 2e-3, 1e-3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var e ClockEstimator
			for _, at := range []time.Duration{0, c.span} {
				sent := base.Add(at)
				received := sent.Add(c.rtt)
				mid := sent.Add(c.rtt / 2)
				server := mid.Round(0).Add(c.offset + time.Duration(c.drift*float64(at)))
				e.Observe(sent, received, server)
			}
			off, bound, rate, rb, ok := e.Estimate()
			if !ok || bound != c.rtt/2 {
				t.Fatalf("estimate ok %v bound %v", ok, bound)
			}
			if want := c.offset + time.Duration(c.drift*float64(c.span)); (off - want).Abs() > time.Microsecond {
				t.Fatalf("offset %v, want %v", off, want)
			}
			if math.Abs(rate-c.wantRate) > 1e-9 || rb <= 0 {
				t.Fatalf("rate %g ± %g, want %g", rate, rb, c.wantRate)
			}
			if got := e.Exceeds(c.exceeds); got != c.wantOver {
				t.Fatalf("Exceeds(%g) = %v (rate %g ± %g)", c.exceeds, got, rate, rb)
			}
		})
	}
	var empty ClockEstimator
	if _, _, _, _, ok := empty.Estimate(); ok || empty.Exceeds(0) {
		t.Fatal("an empty estimator claims an estimate")
	}
}

func TestClockEstimatorWarnsBeforeExceeding(t *testing.T) {
	var e ClockEstimator
	base := time.Now()
	for _, at := range []time.Duration{0, time.Hour} {
		sent := base.Add(at)
		e.Observe(sent, sent.Add(time.Millisecond), sent.Add(500*time.Microsecond).Round(0).Add(time.Duration(7e-4*float64(at))))
	}
	if !e.Warns(1e-3) || e.Exceeds(1e-3) {
		t.Fatalf("drift 7e-4 against ρ 1e-3: warns %v exceeds %v; want a warning, not a refusal", e.Warns(1e-3), e.Exceeds(1e-3))
	}
}
