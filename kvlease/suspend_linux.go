package kvlease

import (
	"time"

	"golang.org/x/sys/unix"
)

// suspendObservable: systemSuspended tells the time suspended.
const suspendObservable = true

// systemSuspended is how long the system has been suspended since it
// booted: CLOCK_BOOTTIME, which counts suspension, less CLOCK_MONOTONIC,
// which does not. The boot clock is read between two reads of the
// monotonic one, taken again if they are far apart (the thread was
// preempted between them). 0 if the clocks cannot be read.
func systemSuspended() time.Duration {
	var s time.Duration
	for range 3 {
		m1, okM1 := clock(unix.CLOCK_MONOTONIC)
		b, okB := clock(unix.CLOCK_BOOTTIME)
		m2, okM2 := clock(unix.CLOCK_MONOTONIC)
		if !okM1 || !okB || !okM2 {
			return 0
		}
		if s = b - (m1+m2)/2; m2-m1 < time.Millisecond {
			break
		}
	}
	return s
}

func clock(id int32) (time.Duration, bool) {
	var ts unix.Timespec
	if unix.ClockGettime(id, &ts) != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
