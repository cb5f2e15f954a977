package membership

import (
	"math"
	"time"
)

// The phi-accrual arithmetic (Hayashibara et al., "The φ Accrual Failure
// Detector", 2004). Pure functions over seconds as float64, table-tested.

const (
	// MaxSuspicion is the suspicion level of a member that memberlist has
	// declared dead or that has left. The heartbeat detector never reports
	// it: its values are capped at MaxSuspicion/10, so Suspicion ==
	// MaxSuspicion means exactly "gossip says this node is gone".
	MaxSuspicion = 1e6

	// detectorCap bounds the detector's own values (see MaxSuspicion).
	detectorCap = MaxSuspicion / 10

	// windowSize is how many heartbeat inter-arrival times the detector
	// keeps per member.
	windowSize = 100

	// minSamples is how many inter-arrival times the detector needs before
	// it trusts their statistics. Until then it assumes the sender keeps
	// its declared interval regularly (see estimate).
	minSamples = 4
)

// window is a ring of the last windowSize inter-arrival times, in seconds.
type window struct {
	buf  [windowSize]float64
	n    int // samples held, ≤ windowSize
	next int // where the next sample goes
}

func (w *window) add(x float64) {
	w.buf[w.next] = x
	w.next = (w.next + 1) % windowSize
	if w.n < windowSize {
		w.n++
	}
}

func (w *window) reset() { *w = window{} }

// stats returns the mean and population standard deviation of the samples
// held and their count. Two passes over at most windowSize values: exact
// enough, and no drift from running sums.
func (w *window) stats() (mean, stddev float64, n int) {
	if w.n == 0 {
		return 0, 0, 0
	}
	s := w.buf[:w.n]
	for _, x := range s {
		mean += x
	}
	mean /= float64(w.n)
	var ss float64
	for _, x := range s {
		d := x - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(w.n)), w.n
}

// estimate returns the mean and standard deviation phi should use, in
// seconds, given a window's statistics (mean, stddev, n samples), whether
// any heartbeat has arrived since the member joined, the sender's nominal
// heartbeat interval and the profile's floor minStd.
//
//   - No heartbeat yet: mean = nominal, stddev = 2·nominal. The first
//     heartbeat can lag the join by a few gossip rounds (the sender may
//     learn of us later than we learn of it), so this is an acceptable
//     pause: suspect after about 12 nominal intervals at phi 8.
//   - Fewer than minSamples intervals: mean = nominal, stddev =
//     max(nominal/4, minStd), as for a sender that keeps its interval.
//   - Otherwise the window's mean, and stddev = max(stddev, mean/4, minStd):
//     a perfectly regular sender would otherwise make phi jump to the
//     threshold on the first late packet.
func estimate(mean, stddev float64, n int, heard bool, nominal, minStd float64) (m, s float64) {
	switch {
	case !heard:
		return nominal, math.Max(2*nominal, minStd)
	case n < minSamples:
		return nominal, math.Max(nominal/4, minStd)
	}
	return mean, math.Max(stddev, math.Max(mean/4, minStd))
}

// phi returns −log10(1 − F(elapsed)), where F is the CDF of the normal
// distribution with the given mean and standard deviation: how unlikely
// (in powers of ten) it is that a heartbeat this late is merely late.
// elapsed is the time since the last heartbeat. The result is ≥ 0 and keeps
// growing (roughly with the square of elapsed) instead of overflowing to
// +Inf far in the tail. A stddev ≤ 0 gives 0 before the mean and +Inf after.
func phi(elapsed, mean, stddev float64) float64 {
	if math.IsNaN(elapsed) || math.IsNaN(mean) || math.IsNaN(stddev) {
		return 0
	}
	if stddev <= 0 {
		if elapsed <= mean {
			return 0
		}
		return math.Inf(1)
	}
	x := (elapsed - mean) / stddev / math.Sqrt2 // 1 − F = erfc(x)/2
	if x <= 20 {
		// erfc(20) ≈ 5e-176: still a normal float64.
		return math.Max(0, -math.Log10(0.5*math.Erfc(x)))
	}
	// Asymptotic expansion: erfc(x) ≈ exp(−x²)/(x√π) · (1 − 1/(2x²) + 3/(4x⁴)),
	// relative error below 1e-7 here.
	x2 := x * x
	lnq := math.Log(0.5) - x2 - math.Log(x*math.SqrtPi) + math.Log1p(-1/(2*x2)+3/(4*x2*x2))
	return -lnq / math.Ln10
}

// discount applies the Lifeguard idea to a suspicion level: while the local
// node's own health score is h > 0 (memberlist's awareness: it has been
// missing acks or refuting suspicions, so it is probably the slow one), its
// judgement of others is divided by 1 + h. memberlist's score is 0…7 with
// the default AwarenessMaxMultiplier of 8.
func discount(level float64, health int) float64 {
	if health <= 0 {
		return level
	}
	return level / float64(1+health)
}

// detectorSuspicion returns the detector's suspicion level for a member
// whose last heartbeat (or join, if !heard) was elapsed ago, capped at
// detectorCap.
func detectorSuspicion(w *window, heard bool, elapsed, nominal, minStd time.Duration) float64 {
	mean, sd, n := w.stats()
	m, s := estimate(mean, sd, n, heard, nominal.Seconds(), minStd.Seconds())
	return math.Min(phi(elapsed.Seconds(), m, s), detectorCap)
}
