package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// acquire --hold reports a lease lost at its deadline (no renewal
// answered) at once. It first sent a release that had no more chance of
// an answer than the renewals, and waited out that attempt: "lease lost"
// and exit 5 came 2 s after the holder's deadline, which with D = 20 s is
// all of the holder margin, 1 s before the server's expiry (found by an
// outside client: two of three cluster nodes killed, 3 of 3 tries with
// 20 s leases, lost some 18 s into the outage; 0 of 3 with 5-8 s leases,
// lost 3-5 s into it).
func TestHoldReportsADeadlineLossAtOnce(t *testing.T) {
	g := kvleasetest.NewFakeGrantor()
	ctx := context.Background()
	l, err := kvlease.Acquire(ctx, g, "jobs.hold", "h1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g.SetMode(kvleasetest.FakeUnreachable) // the cluster lost its quorum: nothing answers
	deadline := l.Deadline()
	err = holdLease(ctx, l, io.Discard)
	late := time.Since(deadline)
	if !errors.Is(err, errLost) {
		t.Fatalf("holdLease = %v, want the lease lost", err)
	}
	if late > 500*time.Millisecond {
		t.Errorf("the loss was reported %v after the holder's deadline, want at once", late.Round(time.Millisecond))
	}
}

// A revoked holder still releases (the service answers), which frees the
// lease for the next holder at once (README "Safety").
func TestHoldReleasesAfterARefusal(t *testing.T) {
	g := kvleasetest.NewFakeGrantor()
	ctx := context.Background()
	l, err := kvlease.Acquire(ctx, g, "jobs.hold", "h1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	g.SetMode(kvleasetest.FakeRefuse)
	if err := holdLease(ctx, l, io.Discard); !errors.Is(err, errLost) {
		t.Fatalf("holdLease = %v, want the lease lost", err)
	}
	if n := len(g.Releases()); n != 1 {
		t.Errorf("%d releases after the refusal, want 1", n)
	}
}

// A stop (SIGTERM) that comes as the holder's deadline passes is a loss,
// not a release: acquire --hold (and register) stopped past their
// deadline (SIGSTOP), revoked or lapsed meanwhile, then sent SIGTERM with
// SIGCONT, took the stop half of the time, released, and said "released",
// exit 0, with no word of the loss (found by an outside client).
func TestHoldStoppedAsItsDeadlinePassesIsLost(t *testing.T) {
	for i := range 20 {
		synctest.Test(t, func(t *testing.T) {
			g := kvleasetest.NewFakeGrantor()
			l, err := kvlease.Acquire(context.Background(), g, "jobs.hold", "h1", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			g.SetMode(kvleasetest.FakeUnreachable) // nothing answers: the lease runs out
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			time.AfterFunc(time.Until(l.Deadline()), cancel) // the stop, as the deadline passes
			if err := holdLease(ctx, l, io.Discard); !errors.Is(err, errLost) {
				t.Fatalf("round %d: holdLease = %v, want the lease lost", i, err)
			}
			time.Sleep(10 * time.Second) // the release sent after the loss gives up (no answer comes)
		})
	}
}

// A stop that comes while a renewal is in flight, one the grantor answers
// "revoked", is a loss, not a release: Close lets the renewal finish, and
// then, the lease lost, sends a best-effort release and returns nil, and
// acquire --hold said "released", exit 0 (found in review).
func TestHoldStoppedAsARenewalFindsItRevokedIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &revokingGrantor{FakeGrantor: kvleasetest.NewFakeGrantor(), renewing: make(chan struct{}), answer: make(chan struct{})}
		l, err := kvlease.Acquire(context.Background(), g, "jobs.hold", "h1", 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		held := make(chan error, 1)
		go func() { held <- holdLease(ctx, l, io.Discard) }()
		<-g.renewing // the renewal is in flight
		cancel()     // the stop (SIGTERM)
		synctest.Wait()
		close(g.answer) // the grantor answers: revoked
		if err := <-held; !errors.Is(err, errLost) {
			t.Fatalf("holdLease = %v, want the lease lost", err)
		}
	})
}

// revokingGrantor answers its first renewal, once told to, as revoked.
type revokingGrantor struct {
	*kvleasetest.FakeGrantor
	renewing chan struct{} // closed as the first renewal comes
	answer   chan struct{} // closed to answer it
	once     sync.Once
}

func (g *revokingGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	first := false
	g.once.Do(func() { first = true; close(g.renewing) })
	if !first {
		return g.FakeGrantor.Renew(ctx, req)
	}
	<-g.answer
	return kvlease.Record{}, fmt.Errorf("%w: %q revoked", kvlease.ErrNotFound, req.Name)
}
