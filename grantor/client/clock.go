package client

import (
	"math"
	"sync"
	"time"
)

// ClockEstimator estimates the offset and the rate error between this
// machine's clock and the grantor's, Cristian-style, from the server time in
// each reply: offset ≈ server − (sent + rtt/2), with an error of at most
// rtt/2. The rate error is measured against this machine's monotonic clock,
// on which holders count their deadlines: Δserver/Δmonotonic − 1 between
// samples far enough apart that the rtt/2 bounds do not dominate. A step of
// this machine's wall clock therefore changes the offset but not the rate.
//
// Each grantor node has its own clock, so samples are kept per answering
// node (the reply's node field) and a rate is only measured between two
// replies of the same node; the estimate reports the worst node.
//
// Safety does not depend on the offset (holders count durations on their
// monotonic clocks), but it does on the rate: a holder clock that runs slow
// by more than the lease's ρ would keep acting after the grantor reclaimed.
// A step of a grantor's wall clock does show as a rate error: the server
// expires keys by its wall clock, so such a step is one the holder must
// hear of.
type ClockEstimator struct {
	mu    sync.Mutex
	nodes map[string]*nodeClock // by answering node; at most maxNodes
	last  clockSample           // the latest sample of any node
	n     uint64                // samples observed, to find the least recent node
	// distrust: a grantor said a deadline computed with the latest offset
	// had passed on arrival (a clock stepped since?): Offset reports none
	// until the next sample.
	distrust bool
}

// nodeClock is one grantor node's samples, oldest first, at most maxSamples.
type nodeClock struct {
	samples []clockSample
	seen    uint64 // ClockEstimator.n at its latest sample
}

type clockSample struct {
	mono   time.Duration // local monotonic reading at the midpoint
	server time.Time     // the node's clock in the reply
	offset time.Duration // server − local wall clock at the midpoint
	bound  time.Duration // rtt/2
}

// clockReading is one reading of the local clocks: the wall clock, which
// offsets are against, and the monotonic clock, which rates are against.
// They are separate so that a test can step one and not the other.
type clockReading struct {
	wall time.Time     // without a monotonic part
	mono time.Duration // since monoEpoch
}

var monoEpoch = time.Now()

// readingOf splits a time.Now() value into its two clocks. A time without a
// monotonic reading counts its wall clock as monotonic.
func readingOf(t time.Time) clockReading {
	return clockReading{wall: t.Round(0), mono: t.Sub(monoEpoch)}
}

const (
	maxSamples = 64 // per node
	maxNodes   = 16 // the least recently heard node is forgotten first
	// sampleSpacing: the samples a node keeps are at least this far apart
	// (but the newest, which replaces the one before it until it is), so
	// that its rate is measured over a span of about maxSamples of them
	// however busy the client: 64 samples of one Client renewing a
	// process's many leases were milliseconds apart, and their round trips
	// swamped any rate error.
	sampleSpacing = time.Second
)

// Observe adds one request's timing: sent and received are local readings
// (time.Now(), with their monotonic parts), server is the grantor's clock in
// the reply. It is ObserveNode for a grantor that did not name its node.
func (c *ClockEstimator) Observe(sent, received, server time.Time) {
	c.ObserveNode("", sent, received, server)
}

// ObserveNode is Observe for a reply from the named grantor node: rates are
// measured only between replies of the same node.
func (c *ClockEstimator) ObserveNode(node string, sent, received, server time.Time) {
	c.observe(node, readingOf(sent), readingOf(received), server)
}

func (c *ClockEstimator) observe(node string, sent, received clockReading, server time.Time) {
	rtt := received.mono - sent.mono
	if server.IsZero() || rtt <= 0 {
		return
	}
	s := clockSample{mono: sent.mono + rtt/2, server: server.Round(0), bound: rtt / 2}
	s.offset = s.server.Sub(sent.wall.Add(rtt / 2))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes == nil {
		c.nodes = make(map[string]*nodeClock)
	}
	nc := c.nodes[node]
	if nc == nil {
		if len(c.nodes) >= maxNodes {
			c.forgetLeastRecentLocked()
		}
		nc = &nodeClock{}
		c.nodes[node] = nc
	}
	c.n++
	nc.seen = c.n
	if n := len(nc.samples); n >= 2 && s.mono-nc.samples[n-2].mono < sampleSpacing {
		nc.samples[n-1] = s
	} else {
		nc.samples = append(nc.samples, s)
		if len(nc.samples) > maxSamples {
			nc.samples = nc.samples[1:]
		}
	}
	c.last = s
	c.distrust = false
}

func (c *ClockEstimator) forgetLeastRecentLocked() {
	var oldest string
	var seen uint64 = math.MaxUint64
	for name, nc := range c.nodes {
		if nc.seen < seen {
			oldest, seen = name, nc.seen
		}
	}
	delete(c.nodes, oldest)
}

// Estimate returns the latest offset (grantor minus local wall clock, from
// whichever node answered last) with its error bound, and the rate error
// (dimensionless, e.g. 1e-4) with its own bound, from the oldest and newest
// samples of the node whose rate error, less its bound, is largest. ok is
// false until some node has answered twice.
func (c *ClockEstimator) Estimate() (offset, bound time.Duration, rate, rateBound float64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		return 0, 0, 0, 0, false
	}
	rate, rateBound = 0, math.Inf(1)
	worst := math.Inf(-1)
	for _, nc := range c.nodes {
		if len(nc.samples) < 2 {
			continue
		}
		r, b, rok := rateOf(nc.samples[0], nc.samples[len(nc.samples)-1])
		if rok && math.Abs(r)-b > worst {
			rate, rateBound, ok, worst = r, b, true, math.Abs(r)-b
		}
	}
	return c.last.offset, c.last.bound, rate, rateBound, ok
}

// Offset returns the latest offset (grantor minus local wall clock) and its
// error bound; ok is false until a node has answered once, and after
// [ClockEstimator.DistrustOffset] until the next answer.
func (c *ClockEstimator) Offset() (offset, bound time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.offset, c.last.bound, c.n > 0 && !c.distrust
}

// DistrustOffset makes Offset report no offset until the next sample: a
// grantor refused a request as arriving after its deadline, which a step
// of either clock since the last sample can also cause.
func (c *ClockEstimator) DistrustOffset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.distrust = true
}

// rateOf is the rate error of a node's clock against the local monotonic
// clock between two of its samples, Δserver/Δmonotonic − 1, and its
// uncertainty.
func rateOf(a, b clockSample) (rate, bound float64, ok bool) {
	dt := b.mono - a.mono
	if dt <= 0 {
		return 0, math.Inf(1), false
	}
	rate = float64(b.server.Sub(a.server)-dt) / float64(dt)
	bound = float64(a.bound+b.bound) / float64(dt)
	return rate, bound, true
}

// Warns reports whether the measured rate error, less its uncertainty, has
// passed half of rho: time to look at the clocks before Exceeds refuses.
func (c *ClockEstimator) Warns(rho float64) bool { return c.Exceeds(rho / 2) }

// Exceeds reports whether the measured rate error of some grantor node,
// less its uncertainty, is beyond rho: then the lease's clock-rate bound no
// longer covers this pair of clocks.
func (c *ClockEstimator) Exceeds(rho float64) bool {
	_, _, rate, bound, ok := c.Estimate()
	return ok && math.Abs(rate)-bound > rho
}
