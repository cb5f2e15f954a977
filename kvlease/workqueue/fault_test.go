package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
)

// The test binary doubles as the worker processes of TestWorkQueueWorkerKilled.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{"worker": worker})
}

// worker claims and completes items of the queue "jobs" until killed,
// printing "claim <item> <token>", "done <item> <token>" or
// "refused <item> <error>".
func worker(url string) error {
	ctx := context.Background()
	js, st, err := kvleasetest.ChildStore(ctx, url)
	if err != nil {
		return err
	}
	q, err := workqueue.Open(ctx, js, st, "jobs")
	if err != nil {
		return err
	}
	name := os.Getenv("KVLEASE_WORKER")
	for {
		c, err := q.Claim(ctx, name, 2*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("claim %s %d\n", c.Item, c.Token())
		time.Sleep(10 * time.Millisecond) // the work
		if err := c.Complete(ctx, []byte(name)); err != nil {
			fmt.Printf("refused %s %v\n", c.Item, err)
			continue
		}
		fmt.Printf("done %s %d\n", c.Item, c.Token())
	}
}

// A claim whose renewal was refused cannot complete, even with its old
// deadline far away.
func TestRefusedClaimCannotComplete(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "rq")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Orphan() // the test renews by hand
	if _, err := st.Revoke(ctx, c.Lease().Name(), "test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Lease().Renew(ctx); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("renew of a revoked claim: %v", err)
	}
	if err := c.Complete(ctx, []byte("late")); !errors.Is(err, kvlease.ErrExpired) {
		t.Fatalf("completion after the refusal: %v, want expired", err)
	}
	if done, _, _, _, err := q.Result(ctx, "item"); err != nil || done {
		t.Fatalf("sink after a refused completion: done=%v %v", done, err)
	}
}

// A claim past its deadline that never sent a completion is refused with
// its expiry at once, with nothing sent: nothing it could have written
// needs looking up. Complete read the sink first, and with the server
// gone said kvlease.ErrUnavailable ("call Complete again") instead
// (found by an outside client: "read sink: context deadline exceeded"
// after its ctx's 1 s, for a claim lost 2 s after its server was
// SIGSTOPped, whose worker then retried until the server came back).
func TestExpiredClaimsCompleteIsRefusedWithoutTheServer(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	q, err := workqueue.Open(ctx, js, st, "eq")
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "item", nil); err != nil {
		t.Fatal(err)
	}
	c, err := q.Claim(ctx, "w1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	<-c.Done() // lost at its deadline, renewals unanswered
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = c.Complete(cctx, []byte("late"))
	var expired *kvlease.LeaseExpiredError
	if !errors.As(err, &expired) {
		t.Fatalf("Complete of a claim past its deadline, the server gone: %v; want a *kvlease.LeaseExpiredError", err)
	}
}
