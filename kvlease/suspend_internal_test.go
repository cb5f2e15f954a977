package kvlease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// standInSuspended makes f the system's count of time suspended until the
// test ends (after the cleanups registered later, such as a keeper's).
func standInSuspended(t *testing.T, f func() time.Duration) {
	suspendedStandIn.Store(&f)
	t.Cleanup(func() {
		suspendedStandIn.Store(nil)
		suspendedMax.Store(0)
	})
}

// sleeper is a machine whose suspensions a test decides.
type sleeper struct{ asleep atomic.Int64 }

func newSleeper(t *testing.T) *sleeper {
	s := &sleeper{}
	standInSuspended(t, func() time.Duration { return suspendedAtStart + time.Duration(s.asleep.Load()) })
	return s
}

// sleep suspends the machine for d, as Go's clocks see it: in no time.
func (s *sleeper) sleep(d time.Duration) { s.asleep.Add(int64(d)) }

func keep(t *testing.T, l *Lease, opts ...KeeperOption) *Keeper {
	t.Helper()
	k, err := Keep(t.Context(), l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.Close(context.Background()) })
	return k
}

// stillGrantor grants and renews whatever it is asked: the holder's side
// alone is under test.
type stillGrantor struct{}

func (stillGrantor) Grant(_ context.Context, req GrantRequest) (Record, error) {
	return Record{Name: req.Name, Holder: req.Holder, Token: 1, Revision: 1, Duration: req.Duration}, nil
}
func (stillGrantor) Renew(_ context.Context, req RenewRequest) (Record, error) {
	return Record{Name: req.Name, Holder: req.Holder, Token: req.Token, Revision: req.Revision + 1, Duration: req.Duration}, nil
}
func (stillGrantor) Release(context.Context, ReleaseRequest) error { return nil }

// A machine suspended past the holder's deadline (a laptop asleep, a VM
// saved and restored) has lost the lease when it resumes, though Go's
// monotonic clock, which stops while suspended, says little time has
// passed: Check passed for what was left of the window, while the server
// had long lapsed the lease (found by an outside client's reading).
func TestSuspendedPastTheDeadlineIsLost(t *testing.T) {
	asleep := suspendedAtStart
	standInSuspended(t, func() time.Duration { return asleep })
	l, err := Acquire(t.Context(), stillGrantor{}, "asleep", "h", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); err != nil {
		t.Fatalf("Check before the suspension: %v", err)
	}
	asleep += time.Hour // the machine slept an hour, monotonic time stood still
	if err := l.Check(); !errors.Is(err, ErrExpired) {
		t.Fatalf("Check after an hour suspended: %v, want ErrExpired", err)
	}
	if err := l.Renew(t.Context()); !errors.Is(err, ErrExpired) {
		t.Fatalf("Renew after an hour suspended: %v, want ErrExpired (no renewal after the deadline)", err)
	}
	// A system count read lower than one before (the two clocks are read
	// one after the other) does not turn the clock back.
	asleep -= time.Millisecond
	if got := suspendedSinceStart(asleep); got != time.Hour {
		t.Errorf("suspended since start after a lower read: %v, want %v", got, time.Hour)
	}
}

// A keeper in a process whose machine was suspended before the lease was
// acquired renews on time: its first renewal was timed on Go's clock from
// a t0 on the lease's, a minute later after a minute asleep, and the
// lease was lost at its deadline with no renewal (found in review).
func TestKeeperRenewsAfterAnEarlierSuspension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		newSleeper(t).sleep(time.Minute)
		l, err := Acquire(t.Context(), stillGrantor{}, "earlier", "h", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var deadlines []time.Time
		k := keep(t, l, WithOnRenew(func(_ Record, deadline time.Time) { deadlines = append(deadlines, deadline) }))
		time.Sleep(2500 * time.Millisecond) // renewals at 1 s and 2 s
		synctest.Wait()
		if k.Context().Err() != nil || len(deadlines) != 2 {
			t.Fatalf("%d renewals in 2.5 s of a 3 s lease, want 2 (keeper: %v)", len(deadlines), k.Err())
		}
		// As time.Now's clock has it, for timers: 3 s less the holder's
		// margin and rate allowance after the renewal at 2 s.
		if left := time.Until(deadlines[1]); left <= 0 || left > 3*time.Second-500*time.Millisecond {
			t.Errorf("deadline after the renewal at 2 s: %v from 2.5 s, want what is left of the 3 s lease", left)
		}
	})
}

// A machine suspended past the deadline while a keeper waits: the keeper
// ends the lease, and its Context, within suspendCheck of resuming, as
// Check does at once (Go's timers stood still: the Context stayed live
// until the next renewal, 10 s on; found in review).
func TestKeeperEndsAfterSuspensionPastItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSleeper(t)
		l, err := Acquire(t.Context(), stillGrantor{}, "slept", "h", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		k := keep(t, l)
		synctest.Wait() // the keeper waits on its timers
		m.sleep(time.Hour)
		time.Sleep(suspendCheck)
		synctest.Wait()
		if !errors.Is(k.Err(), ErrExpired) || k.Context().Err() == nil {
			t.Fatalf("keeper %v, context %v, %v after resuming an hour past the deadline; want ended (Check: %v)",
				k.Err(), k.Context().Err(), suspendCheck, l.Check())
		}
	})
}

// A machine suspended for less than what was left of the window: the
// keeper renews on resuming, not when the renewal's timer, which stood
// still, fires (10 s of a 30 s lease on, 5 s of which the machine slept).
func TestKeeperRenewsOnResuming(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newSleeper(t)
		l, err := Acquire(t.Context(), stillGrantor{}, "napped", "h", 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		k := keep(t, l)
		synctest.Wait()
		m.sleep(5 * time.Second)
		time.Sleep(suspendCheck)
		synctest.Wait()
		if n := k.Stats().Renewals; n != 1 {
			t.Fatalf("%d renewals within %v of resuming from 5 s asleep, want 1 (the next was due 10 s after the grant)", n, suspendCheck)
		}
		if left := l.Remaining(); left < 25*time.Second {
			t.Errorf("%v left after the renewal on resuming, want the lease's window anew", left)
		}
	})
}
