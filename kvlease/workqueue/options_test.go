package workqueue_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
)

// A claim takes lease options (here a holder margin and a clock guard) and
// keeper options; nil options are refused before anything is claimed.
func TestClaimOptions(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "opts")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string][]kvlease.HoldOption{
		"nil option":        {nil},
		"nil lease option":  {kvlease.WithLease(nil)},
		"nil keeper option": {kvlease.WithKeeper(nil)},
	} {
		if _, err := q.Claim(ctx, "w", 10*time.Second, opts...); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}

	var exceeded atomic.Bool
	renewed := make(chan struct{}, 1)
	c, err := q.Claim(ctx, "w", 3*time.Second,
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
	defer c.Close(ctx)
	if m := c.Lease().Margin(); m != 250*time.Millisecond {
		t.Errorf("claim's holder margin %v, want 250ms", m)
	}
	<-renewed
	exceeded.Store(true)
	if err := c.Lease().Check(); !errors.Is(err, kvlease.ErrClockRate) {
		t.Errorf("check with the clock guard tripped: %v, want ErrClockRate", err)
	}
}

// Open refuses options it cannot use before it touches JetStream (a nil js
// and store are never used).
func TestOpenOptions(t *testing.T) {
	for name, opt := range map[string]workqueue.OpenOption{
		"nil option":   nil,
		"no replicas":  workqueue.WithReplicas(0),
		"six replicas": workqueue.WithReplicas(6),
	} {
		if q, err := workqueue.Open(t.Context(), nil, nil, "opts", opt); !errors.Is(err, kvlease.ErrInvalidOption) || q != nil {
			t.Errorf("%s: Open = (%v, %v), want ErrInvalidOption", name, q, err)
		}
	}
}
