package kvlease

import (
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// systemSuspended reads the monotonic clock through Go's runtime: it must
// agree with the system's CLOCK_BOOTTIME less CLOCK_MONOTONIC.
func TestSystemSuspendedIsBootLessMonotonic(t *testing.T) {
	read := func(id int32) time.Duration {
		var ts unix.Timespec
		if err := unix.ClockGettime(id, &ts); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ts.Nano())
	}
	for range 3 {
		m1 := read(unix.CLOCK_MONOTONIC)
		b := read(unix.CLOCK_BOOTTIME)
		m2 := read(unix.CLOCK_MONOTONIC)
		got := systemSuspended()
		if m2-m1 > time.Millisecond {
			continue // preempted between the reads
		}
		if want := b - (m1+m2)/2; got < want-time.Millisecond || got > want+time.Millisecond {
			t.Fatalf("systemSuspended() = %v, the system's clocks say %v", got, want)
		}
		return
	}
	t.Skip("the reads were preempted three times")
}

func BenchmarkSystemSuspended(b *testing.B) {
	for b.Loop() {
		systemSuspended()
	}
}
