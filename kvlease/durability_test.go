package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// kvleasetest's servers run inside the test process, which a test cannot
// SIGKILL and survive; the durability tests run nats-server in a child (the
// test binary in kvleasetest.RoleServer).
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{kvleasetest.RoleServer: kvleasetest.ServeChild})
}

// acked is a write the store acknowledged.
type acked struct {
	name  string
	token kvlease.Token
	rev   uint64
}

// SIGKILL the server under batched load, restart it on its data: every
// grant and renewal the store acknowledged is there (the leases last far
// longer than the test, so none may have lapsed), and a grant after the
// restart gets a token above every one acknowledged before, so no token
// is handed out twice.
func TestBatchedWritesSurviveSIGKILL(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	url := srv.URL
	st := kvleasetest.OpenStore(t, url)
	log := &sendLog{}
	kvlease.SetSendHook(st, log.hook)

	const clients, killAfter = 64, 2000
	var mu sync.Mutex
	var acks []acked
	enough := make(chan struct{})
	ack := func(a acked) {
		mu.Lock()
		defer mu.Unlock()
		acks = append(acks, a)
		if len(acks) == killAfter {
			close(enough)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			// A write in flight when the server dies waits for its context
			// (nats.go does not fail it on the disconnect): 5 s each.
			round := func(i int) error {
				octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
				defer ocancel()
				rec, err := st.Grant(octx, kvlease.GrantRequest{Name: fmt.Sprintf("d.%d.%d", c, i), Holder: "h", Duration: 5 * time.Minute})
				if err != nil {
					return err
				}
				ack(acked{rec.Name, rec.Token, rec.Revision})
				for range 2 {
					if rec, err = st.Renew(octx, kvlease.RenewRequest{Name: rec.Name, Holder: "h", Token: rec.Token, Revision: rec.Revision}); err != nil {
						return err
					}
					ack(acked{rec.Name, rec.Token, rec.Revision})
				}
				return nil
			}
			for i := 0; ctx.Err() == nil && round(i) == nil; i++ {
			}
		})
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("load did not reach its acknowledgements")
	}
	srv.Kill()
	wg.Wait() // every client has failed its next write
	if log.batchCount() == 0 {
		t.Fatal("no batch was sent: the load was not batched")
	}
	srv.Restart()
	after := kvleasetest.OpenStore(t, url, kvlease.WithoutCreate())
	mu.Lock()
	defer mu.Unlock()
	last := map[string]acked{}
	var top uint64
	for _, a := range acks {
		if a.rev > last[a.name].rev {
			last[a.name] = a
		}
		top = max(top, a.rev)
	}
	for name, a := range last {
		rctx, rcancel := context.WithTimeout(t.Context(), 10*time.Second)
		got, err := kvlease.RetryUnavailable(rctx, time.Second, nil, func() (kvlease.Record, error) { return after.Get(rctx, name) })
		rcancel()
		if err != nil || got.Token != a.token || got.Revision < a.rev {
			t.Fatalf("%q after the restart: %+v, %v; acknowledged token %d at revision %d", name, got, err, a.token, a.rev)
		}
	}
	rec, err := after.Grant(t.Context(), kvlease.GrantRequest{Name: "after", Holder: "h", Duration: time.Minute})
	if err != nil || uint64(rec.Token) <= top {
		t.Fatalf("grant after the restart: %+v, %v; want a token above %d", rec, err, top)
	}
	t.Logf("%d writes acknowledged (%d leases, %d batches) before SIGKILL, all there after the restart",
		len(acks), len(last), log.batchCount())
}

// A lease that lapsed, and whose expiry marker has lapsed too, stays gone
// when the server loses its expiry over a SIGKILL and restart
// (kvleasetest.ChildServer.LoseExpiries, nats-server issue 8505): the
// server holds it again, for good, as its old holder's. The store takes
// such a record as lapsed (reads, lists, grants over it), and EndOverdue
// writes the expiry the server lost.
func TestLapsedLeaseStaysLapsedAfterSIGKILL(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	url := srv.URL
	st := kvleasetest.OpenStore(t, url, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	ctx := t.Context()
	lapsed := map[string]kvlease.Record{}
	for _, name := range []string{"gone.granted", "gone.ended"} {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "old", Duration: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		lapsed[name] = rec
	}
	for i := range 20 { // later writes, as a live node has
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("other.%d", i), Holder: "h", Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	srv.LoseExpiries(st, "gone.granted", "gone.ended")
	open := func() *kvlease.Store {
		// Grace 0, not OverdueGrace's 10 s: the leases lapsed seconds ago.
		return kvleasetest.OpenStore(t, url, kvlease.WithoutCreate(), kvlease.WithOverdueGrace(0))
	}
	after := open()
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	all, err := kvlease.RetryUnavailable(rctx, time.Second, nil, func() ([]kvlease.Record, error) { return after.List(rctx, "") })
	if err != nil || len(all) != 30 {
		t.Errorf("list after the restart: %d leases (%v), want the 30 live ones", len(all), err)
	}
	for name := range lapsed {
		if got, err := after.Get(rctx, name); !errors.Is(err, kvlease.ErrNotFound) {
			t.Errorf("%s after the restart: %+v, %v; want ErrNotFound", name, got, err)
		}
	}

	// A grant takes the lease over the record the server kept (a store
	// that has not read it: the grant's own read finds it overdue); a
	// watch that replayed that record as live sees it expire, then the
	// grant.
	gw, err := after.Watch(rctx, "gone.granted")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Stop()
	<-gw.Synced()
	rec, err := open().Grant(rctx, kvlease.GrantRequest{Name: "gone.granted", Holder: "new", Duration: time.Minute})
	old := lapsed["gone.granted"]
	if err != nil || rec.Token <= old.Token {
		t.Errorf("a grant of the lapsed lease after the restart: %+v, %v; want a token above %d", rec, err, old.Token)
	}
	var seen []kvlease.Event
	for len(seen) < 2 && rctx.Err() == nil {
		select {
		case ev := <-gw.Events():
			if !ev.Replay {
				seen = append(seen, ev)
			}
		case <-rctx.Done():
		}
	}
	if len(seen) != 2 || seen[0].Type != kvlease.EventExpired || seen[0].Token != old.Token ||
		seen[1].Type != kvlease.EventGranted || seen[1].Token != rec.Token {
		t.Errorf("the watch of gone.granted saw %+v; want the expiry of token %d, then the grant of %d", seen, old.Token, rec.Token)
	}

	// EndOverdue writes the expiry the server lost; a watch reports it.
	w, err := after.Watch(rctx, "gone.ended", kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if ended, err := after.EndOverdue(rctx, "gone.ended"); !ended || err != nil {
		t.Fatalf("EndOverdue: %v, %v", ended, err)
	}
	old = lapsed["gone.ended"]
	select {
	case ev := <-w.Events():
		if ev.Type != kvlease.EventExpired || ev.Holder != "old" || ev.Token != old.Token {
			t.Errorf("the watch after EndOverdue: %+v; want the expiry of old's tenure %d", ev, old.Token)
		}
	case <-rctx.Done():
		t.Errorf("the watch saw no end after EndOverdue: %v", w.Err())
	}
	if ended, err := after.EndOverdue(rctx, "other.1"); ended || err != nil {
		t.Errorf("EndOverdue of a live lease: %v, %v; want nothing done", ended, err)
	}
}

// EndResurrected and EndAbandoned end only the record they are given: a
// tenure renewed since has its holder at work (found in review: it was
// ended, without hold). What they end is free at once.
func TestEndingAGivenTenureLeavesOneRenewedSince(t *testing.T) {
	for name, end := range map[string]func(*kvlease.Store, context.Context, kvlease.Record) (bool, error){
		"EndResurrected": (*kvlease.Store).EndResurrected,
		"EndAbandoned": func(st *kvlease.Store, ctx context.Context, rec kvlease.Record) (bool, error) {
			return st.EndAbandoned(ctx, rec, "its holder stopped")
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, st := kvleasetest.NewStore(t)
			ctx := t.Context()
			g, err := st.Grant(ctx, kvlease.GrantRequest{Name: "r", Holder: "h", Duration: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			seen, err := st.Get(ctx, "r") // as an observer's replay shows it
			if err != nil {
				t.Fatal(err)
			}
			r, err := st.Renew(ctx, kvlease.RenewRequest{Name: "r", Holder: "h", Token: g.Token, Revision: g.Revision, Secret: g.Secret})
			if err != nil {
				t.Fatal(err)
			}
			if ended, err := end(st, ctx, seen); ended || err != nil {
				t.Fatalf("%s of revision %d, renewed since: ended %v, %v; want it left alone", name, seen.Revision, ended, err)
			}
			cur, err := st.Get(ctx, "r")
			if err != nil {
				t.Fatal(err)
			}
			if ended, err := end(st, ctx, cur); !ended || err != nil {
				t.Fatalf("%s of the live revision %d (renewed to %d): ended %v, %v", name, cur.Revision, r.Revision, ended, err)
			}
			if _, err := st.Get(ctx, "r"); !errors.Is(err, kvlease.ErrNotFound) {
				t.Fatalf("after %s: %v; want not found", name, err)
			}
			if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "r", Holder: "next", Duration: time.Minute}); err != nil {
				t.Errorf("a grant after %s: %v; want the lease free", name, err)
			}
		})
	}
	_, st := kvleasetest.NewStore(t)
	if _, err := st.EndAbandoned(t.Context(), kvlease.Record{Name: "r"}, kvlease.ResurrectedReason); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("EndAbandoned with the grantor's own reason: %v, want ErrInvalidOption", err)
	}
}
