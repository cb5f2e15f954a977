package workqueue_test

import (
	"context"
	"errors"
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
	kvleasetest.CheckHoldOptions(t, func(d time.Duration, opts ...kvlease.HoldOption) (*kvlease.Lease, error) {
		c, err := q.Claim(ctx, "w", d, opts...)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c.Lease(), nil
	})
}

// Options a claim's lease or keeper cannot take are refused at once, on an
// empty queue too: not after Claim has waited for an item and been
// granted its claim (which it then released).
func TestClaimRefusesBadOptionsBeforeWaiting(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	q, err := workqueue.Open(t.Context(), js, st, "empty")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := q.Claim(ctx, "w", 10*time.Second, kvlease.WithKeeper(kvlease.WithRenewInterval(time.Hour))); !errors.Is(err, kvlease.ErrInvalidTiming) {
		t.Fatalf("claim with an hour's renewal interval on an empty queue: %v, want ErrInvalidTiming at once", err)
	}
	// So are a worker name and a duration no grant takes (Claim waited
	// for ctx with them; found by an outside client).
	if _, err := q.Claim(ctx, "", 10*time.Second); !errors.Is(err, kvlease.ErrInvalidHolder) {
		t.Errorf("claim by an empty worker name: %v, want ErrInvalidHolder at once", err)
	}
	if _, err := q.Claim(ctx, "w", 2*time.Hour); !errors.Is(err, kvlease.ErrDurationOutOfRange) {
		t.Errorf("claim for 2 h (the store's maximum is 1 h): %v, want ErrDurationOutOfRange at once", err)
	}
	// A payload over the server's max_payload is too large, every time,
	// not unavailable (which says: try again).
	if err := q.Add(ctx, "big", make([]byte, 2<<20)); !errors.Is(err, kvlease.ErrTooLarge) || errors.Is(err, kvlease.ErrUnavailable) {
		t.Errorf("add of 2 MiB: %v, want ErrTooLarge", err)
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
