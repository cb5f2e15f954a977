package election_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A campaign takes lease options (here a holder margin and a clock guard)
// and keeper options; nil options are refused before anything is tried.
func TestCampaignOptions(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, err := election.New(st, "leader.opts")
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]kvlease.HoldOption{
		"nil option":        {nil},
		"nil lease option":  {kvlease.WithLease(nil)},
		"nil keeper option": {kvlease.WithKeeper(nil)},
	} {
		if _, err := e.Campaign(ctx, "c", 10*time.Second, opts...); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}

	var exceeded atomic.Bool
	renewed := make(chan struct{}, 1)
	c, err := e.Campaign(ctx, "c", 3*time.Second,
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
	defer c.Resign(ctx)
	if m := c.Lease().Margin(); m != 250*time.Millisecond {
		t.Errorf("leadership's holder margin %v, want 250ms", m)
	}
	<-renewed
	exceeded.Store(true)
	if err := c.Lease().Check(); !errors.Is(err, kvlease.ErrClockRate) {
		t.Errorf("check with the clock guard tripped: %v, want ErrClockRate", err)
	}
}
