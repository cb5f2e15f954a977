package kvlease

import (
	"time"

	"golang.org/x/sys/unix"
)

// suspendObservable: systemSuspended tells the time suspended.
const suspendObservable = true

// monoBase and monoAtBase anchor monotonic: Go's monotonic clock is
// CLOCK_MONOTONIC, read through the vDSO without a system call, and
// monoAtBase is CLOCK_MONOTONIC read by one at monoBase (-1 if it cannot
// be read: then neither can the boot clock be trusted).
var monoBase, monoAtBase = time.Now(), func() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}()

// monotonic is CLOCK_MONOTONIC, to within the microseconds between the
// two reads at monoBase.
func monotonic() time.Duration { return monoAtBase + time.Since(monoBase) }

// systemSuspended is how long the system has been suspended since it
// booted: CLOCK_BOOTTIME, which counts suspension, less CLOCK_MONOTONIC,
// which does not. The boot clock is read between two reads of
// the monotonic one, taken again if they are far apart (the thread was
// preempted between them). 0 if the clocks cannot be read.
//
// One system call: the boot clock's. The monotonic clock was read with
// unix.ClockGettime too, three system calls per read, and an observing
// grantor, which checks its lease on each change it reports, spent 2% of
// its CPU there under load (a CPU profile of serve).
func systemSuspended() time.Duration {
	if monoAtBase < 0 {
		return 0
	}
	var s time.Duration
	for range 3 {
		m1 := monotonic()
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
			return 0
		}
		m2 := monotonic()
		if s = time.Duration(ts.Nano()) - (m1+m2)/2; m2-m1 < time.Millisecond {
			break
		}
	}
	return s
}
