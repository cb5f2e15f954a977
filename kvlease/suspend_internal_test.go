package kvlease

import (
	"context"
	"errors"
	"testing"
	"time"
)

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
	suspended = func() time.Duration { return asleep }
	t.Cleanup(func() {
		suspended = systemSuspended
		suspendedMax.Store(0)
	})
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
