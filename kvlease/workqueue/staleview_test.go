package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
)

// A worker whose view of the queue is stale (it was paused while others
// completed the items) takes no claim on an item that is gone: each such
// claim was a grant and a release of its own, in the history and on the
// timeline as a tenure of that worker on an item it never worked (found
// by an outside client: a worker SIGSTOPped for 6 s made 599 such claims,
// one on every item of a 600-item queue, when it resumed).
func TestClaimOnAStaleViewGrantsNothingForGoneItems(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	st, err := kvlease.Open(ctx, js, kvlease.WithBucket("stale-view"), kvlease.WithGrantorMargin(0))
	if err != nil {
		t.Fatal(err)
	}
	done, err := workqueue.Open(ctx, js, st, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer done.Close()
	var ids []string
	for i := range 20 {
		id := fmt.Sprintf("item-%02d", i)
		ids = append(ids, id)
		if err := done.Add(ctx, id, []byte("p")); err != nil {
			t.Fatal(err)
		}
	}
	for range ids {
		c, err := done.Claim(ctx, "fast", 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Complete(ctx, []byte("r")); err != nil {
			t.Fatal(err)
		}
	}
	stale, err := workqueue.Open(ctx, js, st, "q")
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	// Once the stale queue's follow has read past every item's end (the
	// end of one more item, added and completed after them), its view is
	// made stale by hand: as a worker paused before they were done sees them.
	if err := done.Add(ctx, "last", []byte("p")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stale.WaitStateSize(ctx, func(pending, _ int) bool { return pending == 1 }); err != nil {
		t.Fatal(err)
	}
	c, err := done.Claim(ctx, "fast", 5*time.Second)
	if err != nil || c.Item != "last" {
		t.Fatalf("claim: %v, %v", c, err)
	}
	if err := c.Complete(ctx, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := stale.WaitStateSize(ctx, func(pending, claimed int) bool { return pending == 0 && claimed == 0 }); err != nil {
		t.Fatal(err)
	}
	stale.MarkPending(ids...)

	leases, err := js.Stream(ctx, "KV_stale-view")
	if err != nil {
		t.Fatal(err)
	}
	before, err := leases.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c, err := stale.Claim(cctx, "slow", 5*time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("claim on a queue with nothing pending: %v, %v", c, err)
	}
	after, err := leases.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := after.State.LastSeq - before.State.LastSeq; n != 0 {
		t.Fatalf("%d writes to the lease bucket (grants and releases of claims on completed items), want 0", n)
	}
}
