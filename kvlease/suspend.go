package kvlease

import (
	"sync/atomic"
	"time"
)

// Go's monotonic clock (CLOCK_MONOTONIC on Linux) stops while the machine
// is suspended (a laptop asleep, a VM saved and restored), so a deadline
// counted on it alone moves later by the time asleep: a holder that
// resumed would pass Check, and act, for what was left of its window,
// although the server had lapsed its lease long before. holderNow, the
// clock a Lease counts its deadline on, is time.Now advanced by the time
// the machine has been suspended since this process started (where the
// system tells it: Linux's CLOCK_BOOTTIME, which counts suspension, less
// CLOCK_MONOTONIC). Elsewhere it is time.Now.

// suspendedAtStart is the suspension the system had counted when this
// process started; suspendedMax the most it has counted since, as read
// (the two clocks are read one after the other, so a later read can come
// out nanoseconds lower; holderNow never goes back).
var (
	suspendedAtStart = systemSuspended()
	suspendedMax     atomic.Int64
	suspendedStandIn atomic.Pointer[func() time.Duration] // a test's stand-in for the system
)

// suspended is the system's count of time suspended since it booted.
func suspended() time.Duration {
	if f := suspendedStandIn.Load(); f != nil {
		return (*f)()
	}
	return systemSuspended()
}

// suspendFloor is the least suspension holderNow counts.
const suspendFloor = 50 * time.Millisecond

// suspendCheck is how often a keeper looks at its lease's deadline where
// the system counts suspension (suspendObservable): Go's timers, like its
// monotonic clock, stop while the machine is suspended, so a keeper that
// waited for its deadline's timer alone would end the lease, and its
// Context, long after the deadline had passed on resuming (Check saw it at
// once; found in review).
const suspendCheck = time.Second

// holderNow is time.Now, advanced by the time the machine has been
// suspended since the process started. Its monotonic reading moves with
// it, so deadlines compared on it count the suspension.
func holderNow() time.Time {
	return time.Now().Add(suspendedSinceStart(suspended()))
}

// suspendedSinceStart is how long the machine has been suspended since
// the process started, given the system's count now (never less than a
// count given before).
func suspendedSinceStart(now time.Duration) time.Duration {
	d := int64(now - suspendedAtStart)
	if d < int64(suspendFloor) {
		// Jitter of the two clocks' reads (microseconds), not a
		// suspension (which takes seconds): leave time.Now as it is.
		d = 0
	}
	for {
		seen := suspendedMax.Load()
		if d <= seen {
			return time.Duration(seen)
		}
		if suspendedMax.CompareAndSwap(seen, d) {
			return time.Duration(d)
		}
	}
}
