package client

import (
	"fmt"
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

// fakeClock is this machine's clocks, set by the test: wall can step while
// mono runs on.
type fakeClock struct {
	wall time.Time
	mono time.Duration
}

func (f *fakeClock) advance(d time.Duration) { f.wall, f.mono = f.wall.Add(d), f.mono+d }
func (f *fakeClock) read() clockReading      { return clockReading{wall: f.wall, mono: f.mono} }

// request observes one request to node of rtt, whose clock reads server at
// the midpoint.
func request(e *ClockEstimator, f *fakeClock, node string, rtt time.Duration, server func(mono time.Duration) time.Time) {
	sent := f.read()
	f.advance(rtt)
	e.observe(node, sent, f.read(), server(sent.mono+rtt/2))
}

// Issue 10 item 4: a step of the holder's wall clock is not a rate error.
// Deadlines are counted on the monotonic clock, which does not step, so
// the rate is measured against it; the offset follows the wall clock.
func TestClockEstimatorHolderWallStep(t *testing.T) {
	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	for _, step := range []time.Duration{500 * time.Millisecond, -500 * time.Millisecond, 30 * time.Second} {
		t.Run(step.String(), func(t *testing.T) {
			var e ClockEstimator
			f := &fakeClock{wall: base}
			exact := func(mono time.Duration) time.Time { return base.Add(mono) } // the grantor's clock, in step
			for i := range 20 {
				if i == 5 {
					f.wall = f.wall.Add(step) // NTP steps the holder's wall clock
				}
				request(&e, f, "n1", time.Millisecond, exact)
				f.advance(3 * time.Second) // the next renewal
			}
			offset, bound, rate, rb, ok := e.Estimate()
			if !ok || math.Abs(rate) > 1e-9 {
				t.Fatalf("rate %g ± %g (ok %v) after a wall step of %v; want 0", rate, rb, ok, step)
			}
			if e.Exceeds(1e-3) || e.Warns(1e-3) {
				t.Fatalf("a wall step of %v reads as a rate error above ρ", step)
			}
			if (offset + step).Abs() > bound {
				t.Fatalf("offset %v ± %v, want %v: the wall clocks now differ by the step", offset, bound, -step)
			}
		})
	}
	// The monotonic clock running slow is what must still be caught.
	var e ClockEstimator
	f := &fakeClock{wall: base}
	fast := func(mono time.Duration) time.Time { return base.Add(mono + time.Duration(5e-3*float64(mono))) }
	for range 20 {
		request(&e, f, "n1", time.Millisecond, fast)
		f.advance(3 * time.Second)
	}
	if _, _, rate, _, _ := e.Estimate(); math.Abs(rate-5e-3) > 1e-6 || !e.Exceeds(1e-3) {
		t.Fatalf("grantor fast by 5e-3: rate %g, exceeds %v", rate, e.Exceeds(1e-3))
	}
}

// Issue 10 item 4: grantor nodes' clocks differ by a constant offset; a
// rate is measured only between replies of one node, so alternating nodes
// is no drift. A node that does drift is reported whichever answered last.
func TestClockEstimatorPerNode(t *testing.T) {
	base := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	clocks := map[string]func(time.Duration) time.Time{
		"n1": func(m time.Duration) time.Time { return base.Add(m) },
		"n2": func(m time.Duration) time.Time { return base.Add(m + 2*time.Second) },
		"n3": func(m time.Duration) time.Time { return base.Add(m - 700*time.Millisecond) },
	}
	var e ClockEstimator
	f := &fakeClock{wall: base}
	for i := range 30 {
		node := []string{"n1", "n2", "n3"}[(i*i)%3] // irregular: n2 and n3 lead in turn
		request(&e, f, node, 2*time.Millisecond, clocks[node])
		f.advance(time.Second)
	}
	if _, _, rate, rb, ok := e.Estimate(); !ok || math.Abs(rate) > 1e-9 || e.Exceeds(1e-3) {
		t.Fatalf("three nodes in step, offsets apart: rate %g ± %g (ok %v), exceeds %v", rate, rb, ok, e.Exceeds(1e-3))
	}
	clocks["n3"] = func(m time.Duration) time.Time { return base.Add(m + time.Duration(4e-3*float64(m))) }
	var d ClockEstimator
	for i := range 30 {
		node := []string{"n3", "n1", "n2"}[i%3] // n2 answers last
		request(&d, f, node, 2*time.Millisecond, clocks[node])
		f.advance(time.Second)
	}
	if _, _, rate, _, _ := d.Estimate(); math.Abs(rate-4e-3) > 1e-6 || !d.Exceeds(1e-3) {
		t.Fatalf("n3 fast by 4e-3: rate %g, exceeds %v", rate, d.Exceeds(1e-3))
	}
}

// The estimator keeps at most maxNodes nodes, forgetting the least recent.
func TestClockEstimatorForgetsOldNodes(t *testing.T) {
	var e ClockEstimator
	f := &fakeClock{wall: time.Now()}
	for i := range 3 * maxNodes {
		request(&e, f, fmt.Sprint("n", i), time.Millisecond, func(m time.Duration) time.Time { return f.wall })
	}
	if len(e.nodes) != maxNodes {
		t.Fatalf("%d nodes kept, want %d", len(e.nodes), maxNodes)
	}
	if _, ok := e.nodes[fmt.Sprint("n", 3*maxNodes-1)]; !ok {
		t.Fatal("the latest node was forgotten")
	}
}

// A busy client (one Client renews all of a process's leases) measures a
// node's rate over the same span as a quiet one: a grantor clock 5× past
// ρ is caught at 1,000 requests a second as at 10. It kept the last 64
// samples, milliseconds apart at that rate, whose round trips swamped the
// rate error.
func TestClockEstimatorBusyClient(t *testing.T) {
	const rate, rtt, rho = 5e-3, time.Millisecond, 1e-3
	for _, perSec := range []int{10, 100, 1000} {
		var c ClockEstimator
		base := time.Unix(1_700_000_000, 0)
		step := time.Second / time.Duration(perSec)
		for i := range 10 * perSec { // ten seconds of requests
			sent := base.Add(time.Duration(i) * step)
			mid := time.Duration(i)*step + rtt/2
			c.Observe(sent, sent.Add(rtt), base.Add(mid+time.Duration(float64(mid)*rate)))
		}
		if _, _, r, b, _ := c.Estimate(); !c.Exceeds(rho) {
			t.Errorf("%d requests/s: a rate error of %g (measured %.2g ± %.2g) does not exceed ρ = %g", perSec, rate, r, b, rho)
		}
	}
}
