package telemetry

import (
	"maps"
	"sync"
	"time"
)

// FlapDetector flags leases that change hands too often: more than
// Threshold new tenures within Window. Every [FlapDetector.Granted] counts,
// whoever the holder: the detector never compares holders, so a holder that
// re-acquires its own lease after a lapse or a release counts too (it lost
// authority in between).
//
// It is safe for concurrent use and keeps, per lease, only the change times
// still inside the window. It forgets a lease on its own once the lease's
// last change is a window old (whether the lease ended or is simply held):
// every call sweeps, at most once per window, so memory stays bounded by
// the leases that changed hands in the last two windows, whatever the
// number of leases that ever existed.
type FlapDetector struct {
	Window    time.Duration
	Threshold int

	mu        sync.Mutex
	state     map[string]*flapState
	peak      int // the most leases state has held since it was last made anew
	nextSweep time.Time
}

type flapState struct {
	changes []time.Time
	token   uint64 // the latest tenure counted ([FlapDetector.GrantedTenure])
}

// DefaultFlapWindow and DefaultFlapThreshold: more than 3 new tenures in a
// minute.
const (
	DefaultFlapWindow    = time.Minute
	DefaultFlapThreshold = 3
)

// NewFlapDetector returns a detector; zero values take the defaults.
func NewFlapDetector(window time.Duration, threshold int) *FlapDetector {
	if window <= 0 {
		window = DefaultFlapWindow
	}
	if threshold <= 0 {
		threshold = DefaultFlapThreshold
	}
	return &FlapDetector{Window: window, Threshold: threshold, state: map[string]*flapState{}}
}

// Granted records a new tenure of lease at time at and returns how many
// new tenures the window now holds and whether the lease is flapping.
func (f *FlapDetector) Granted(lease string, at time.Time) (changes int, flapping bool) {
	return f.count(lease, 0, at)
}

// GrantedTenure is Granted for tenure token of lease, counted once: a
// tenure at or below the latest counted is not counted again. Two views of
// one grant (the grant's own answer, a watch's event of it) count it once,
// whichever comes first.
func (f *FlapDetector) GrantedTenure(lease string, token uint64, at time.Time) (changes int, flapping bool) {
	return f.count(lease, token, at)
}

// count records a new tenure of lease at at, unless token is not 0 and not
// above the latest counted.
func (f *FlapDetector) count(lease string, token uint64, at time.Time) (changes int, flapping bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked(at)
	s := f.state[lease]
	if s == nil {
		s = &flapState{}
		f.state[lease] = s
		f.peak = max(f.peak, len(f.state))
	}
	if token == 0 || token > s.token {
		s.token = max(s.token, token)
		s.changes = append(trimBefore(s.changes, at.Add(-f.Window)), at)
	}
	return len(s.changes), len(s.changes) > f.Threshold
}

// Flapping reports whether lease is flapping as of now.
func (f *FlapDetector) Flapping(lease string, now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked(now)
	s := f.state[lease]
	if s == nil {
		return false
	}
	s.changes = trimBefore(s.changes, now.Add(-f.Window))
	if len(s.changes) == 0 {
		delete(f.state, lease)
		return false
	}
	return len(s.changes) > f.Threshold
}

// sweepLocked forgets the leases whose last change is older than the
// window, once per window (amortised O(1) per call).
func (f *FlapDetector) sweepLocked(now time.Time) {
	if now.Before(f.nextSweep) {
		return
	}
	cutoff := now.Add(-f.Window)
	for name, s := range f.state {
		if len(s.changes) == 0 || s.changes[len(s.changes)-1].Before(cutoff) {
			delete(f.state, name)
		}
	}
	// A Go map keeps the room it grew to: an idle serve kept 8 MB of it
	// after a churn of distinct names. Made anew once it holds a quarter.
	if len(f.state) < f.peak/4 {
		f.state = maps.Collect(maps.All(f.state))
		f.peak = len(f.state)
	}
	f.nextSweep = now.Add(f.Window)
}

// Sweep forgets the leases whose last change is a window old, as every
// call does at most once per window: for an owner that may go quiet after
// a burst, so that the memory the burst took is given back (an idle serve
// kept, for good, the last minute of a churn of distinct names).
func (f *FlapDetector) Sweep(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked(now)
}

// trimBefore drops the times before cutoff (ts is in order).
func trimBefore(ts []time.Time, cutoff time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(cutoff) {
		i++
	}
	return append(ts[:0], ts[i:]...)
}

// Len returns how many leases the detector tracks.
func (f *FlapDetector) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.state)
}
