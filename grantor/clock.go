package grantor

import (
	"math"
	"sync"
	"time"
)

// ClockEstimator estimates the offset and the rate error between this
// machine's clock and the grantor's, Cristian-style, from the server time in
// each reply: offset ≈ server − (sent + rtt/2), with an error of at most
// rtt/2. The rate error is the change of offset over time between samples
// far enough apart that the rtt/2 bounds do not dominate.
//
// Safety does not depend on the offset (holders count durations on their
// monotonic clocks), but it does on the rate: a holder clock that runs slow
// by more than the lease's ρ would keep acting after the grantor reclaimed.
type ClockEstimator struct {
	mu      sync.Mutex
	samples []clockSample // oldest first, at most maxSamples
}

type clockSample struct {
	mono   time.Time // local monotonic reading at the midpoint
	offset time.Duration
	bound  time.Duration // rtt/2
}

const maxSamples = 64

// Observe adds one request's timing: sent and received are local readings
// (with their monotonic parts), server is the grantor's clock in the reply.
func (c *ClockEstimator) Observe(sent, received, server time.Time) {
	if server.IsZero() || !received.After(sent) {
		return
	}
	rtt := received.Sub(sent)
	mid := sent.Add(rtt / 2)
	s := clockSample{mono: mid, offset: server.Sub(mid.Round(0)), bound: rtt / 2}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples = append(c.samples, s)
	if len(c.samples) > maxSamples {
		c.samples = c.samples[1:]
	}
}

// Estimate returns the latest offset (grantor minus local) with its error
// bound, and the rate error (dimensionless, e.g. 1e-4) with its own bound,
// from the oldest and newest samples. ok is false without two samples.
func (c *ClockEstimator) Estimate() (offset, bound time.Duration, rate, rateBound float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.samples) == 0 {
		return 0, 0, 0, 0, false
	}
	last := c.samples[len(c.samples)-1]
	if len(c.samples) < 2 {
		return last.offset, last.bound, 0, math.Inf(1), false
	}
	rate, rateBound, ok = rateOf(c.samples[0], last)
	return last.offset, last.bound, rate, rateBound, ok
}

// rateOf is the drift between two samples and its uncertainty.
func rateOf(a, b clockSample) (rate, bound float64, ok bool) {
	dt := b.mono.Sub(a.mono)
	if dt <= 0 {
		return 0, math.Inf(1), false
	}
	rate = float64(b.offset-a.offset) / float64(dt)
	bound = float64(a.bound+b.bound) / float64(dt)
	return rate, bound, true
}

// Warns reports whether the measured rate error, less its uncertainty, has
// passed half of rho: time to look at the clocks before Exceeds refuses.
func (c *ClockEstimator) Warns(rho float64) bool { return c.Exceeds(rho / 2) }

// Exceeds reports whether the measured rate error, less its uncertainty,
// is beyond rho: then the lease's clock-rate bound no longer covers this
// pair of clocks.
func (c *ClockEstimator) Exceeds(rho float64) bool {
	_, _, rate, bound, ok := c.Estimate()
	return ok && math.Abs(rate)-bound > rho
}
