package kvleasetest

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
)

// CheckHoldOptions tests a recipe that takes [kvlease.HoldOption]s (an
// election's Campaign, a work queue's Claim): nil options are refused with
// kvlease.ErrInvalidOption before anything is tried, and lease and keeper
// options reach the lease it holds (a holder margin, a clock guard, a
// renewal interval, an OnRenew callback). hold takes a lease of duration d
// with opts and registers its release with t.Cleanup.
func CheckHoldOptions(t *testing.T, hold func(d time.Duration, opts ...kvlease.HoldOption) (*kvlease.Lease, error)) {
	t.Helper()
	for name, opts := range map[string][]kvlease.HoldOption{
		"nil option":        {nil},
		"nil lease option":  {kvlease.WithLease(nil)},
		"nil keeper option": {kvlease.WithKeeper(nil)},
		"nil OnLost":        {kvlease.WithKeeper(kvlease.WithOnLost(nil))},
	} {
		if _, err := hold(10*time.Second, opts...); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	for name, opts := range map[string][]kvlease.HoldOption{
		"renewal interval past the window": {kvlease.WithKeeper(kvlease.WithRenewInterval(time.Hour))},
		"holder margin as long as D":       {kvlease.WithLease(kvlease.WithHolderMargin(10 * time.Second))},
	} {
		if _, err := hold(10*time.Second, opts...); !errors.Is(err, kvlease.ErrInvalidTiming) {
			t.Errorf("%s: %v, want ErrInvalidTiming", name, err)
		}
	}

	var exceeded atomic.Bool
	renewed := make(chan struct{}, 1)
	l, err := hold(3*time.Second,
		kvlease.WithLease(kvlease.WithHolderMargin(250*time.Millisecond),
			kvlease.WithClockGuard(func(float64) bool { return exceeded.Load() })),
		kvlease.WithKeeper(kvlease.WithRenewInterval(100*time.Millisecond),
			kvlease.WithOnRenew(func(kvlease.Record, time.Time) {
				select {
				case renewed <- struct{}{}:
				default:
				}
			})))
	if err != nil {
		t.Fatal(err)
	}
	if m := l.Margin(); m != 250*time.Millisecond {
		t.Errorf("holder margin %v, want 250ms", m)
	}
	<-renewed
	exceeded.Store(true)
	if err := l.Check(); !errors.Is(err, kvlease.ErrClockRate) {
		t.Errorf("check with the clock guard tripped: %v, want ErrClockRate", err)
	}
}
