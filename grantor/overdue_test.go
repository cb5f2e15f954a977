package grantor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Tests that SIGKILL a NATS server run it as a child: the test binary in
// kvleasetest.RoleServer.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{kvleasetest.RoleServer: kvleasetest.ServeChild})
}

// A lease whose expiry the server lost over a SIGKILL and restart
// (kvleasetest.ChildServer.LoseExpiries, nats-server issue 8505) is held
// again for good; the observer ends it, as an expiry, so that watchers and
// the history see it go.
func TestObserverEndsLeasesTheServerKeptPastTheirTTL(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	stuck, err := st.Grant(ctx, kvlease.GrantRequest{Name: "stuck", Holder: "old", Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("other.%d", i), Holder: "h", Duration: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	srv.LoseExpiries(st, "stuck")

	w, f := watchThenSweep(t, srv.URL, "stuck")
	select {
	case ev := <-w.Events():
		if ev.Type != kvlease.EventExpired || ev.Token != stuck.Token || ev.Holder != "old" {
			t.Errorf("the change after the restart: %+v; want the expiry of old's tenure %d", ev, stuck.Token)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nothing ended the lease the server kept (%v)", w.Err())
	}
	end := waitRecords(t, f.svc.History(), "stuck", 1)[0]
	if end.Kind != history.KindEnded || end.EndedBy != history.EndExpired || end.Token != uint64(stuck.Token) ||
		end.Holder != "old" || end.Reason == "" {
		t.Errorf("the history's record of the end: %+v", end)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if got, err := f.store.Get(rctx, "stuck"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("the lease after the observer ended it: %+v, %v", got, err)
	}
}

// Until the observer ends them, the leases the server kept past their TTL
// are left out of the service's pages and counts, which come from its own
// index, and do not count against their holder's limit (an outside client
// found them listed, counted and limiting for the 10 s before the
// observer's ends landed).
func TestServiceLeavesOutLeasesTheServerKeptPastTheirTTL(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	for _, name := range []string{"stuck.1", "stuck.2"} {
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "old", Duration: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	srv.LoseExpiries(st, "stuck.1", "stuck.2")
	cfg := grantor.DefaultConfig()
	cfg.MaxLeasesPerHolder = 2
	// An observer that does not sweep in this test's time: the service's
	// own views must leave the leases out without its ends.
	f := startOnStore(t, srv.URL, []kvlease.Option{kvlease.WithoutCreate(), kvlease.WithOverdueGrace(0)},
		cfg, grantor.WithOverdueSweep(time.Hour))
	if got, err := f.client.List(ctx, "stuck."); err != nil || len(got) != 0 {
		t.Errorf("a page of stuck.*: %+v, %v; want none", got, err)
	}
	if n, err := f.client.Count(ctx, "stuck."); err != nil || n != 0 {
		t.Errorf("the count of stuck.*: %d, %v; want 0", n, err)
	}
	if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "fresh", Holder: "old", Duration: 10 * time.Second}); err != nil {
		t.Errorf("a grant to the holder of the two leases the server kept, limit 2: %v", err)
	}
	if n, err := f.client.Count(ctx, ""); err != nil || n != 11 {
		t.Errorf("the count of all leases: %d, %v; want 11 (fresh and LoseExpiries' ten)", n, err)
	}
}

// A tenure the history has already ended, brought back by the server over
// an unclean restart once its ids left the history's duplicates window,
// is ended in the bucket again but not recorded or announced again: the
// history kept two ends of one tenure (the timeline then showed the
// second), and a second expiry was published, traced and counted for
// leases that had been released minutes before (found by an outside
// client).
func TestObserverDoesNotEndAnEndedTenureAgain(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	stuck, err := st.Grant(ctx, kvlease.GrantRequest{Name: "stuck", Holder: "old", Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv.LoseExpiries(st, "stuck")
	// The history as an observer left it: the tenure's begin and its end,
	// appended without ids, as they are to a stream past its window.
	nc := kvleasetest.Connect(t, srv.URL)
	js := kvleasetest.JetStream(t, nc)
	hist, err := history.Open(ctx, js, kvlease.DefaultBucket, history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []history.Record{
		{Kind: history.KindGranted, Name: "stuck", Token: uint64(stuck.Token), Holder: "old", Revision: stuck.Revision, Time: stuck.GrantedAt},
		{Kind: history.KindEnded, Name: "stuck", Token: uint64(stuck.Token), Holder: "old", Revision: stuck.Revision + 1,
			Time: stuck.GrantedAt.Add(time.Second), EndedBy: history.EndExpired},
	} {
		b, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, history.Subject(kvlease.DefaultBucket, "stuck"), b); err != nil {
			t.Fatal(err)
		}
	}
	events := make(chan *nats.Msg, 4)
	kvleasetest.Subscribe(t, nc, api.SubjectEvents+"stuck", func(m *nats.Msg) { events <- m })

	w, f := watchThenSweep(t, srv.URL, "stuck")
	// Ended in the bucket.
	select {
	case ev := <-w.Events():
		if ev.Type != kvlease.EventExpired || ev.Token != stuck.Token {
			t.Fatalf("the change after the restart: %+v; want the expiry of tenure %d", ev, stuck.Token)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nothing ended the lease the server kept (%v)", w.Err())
	}
	// The observer reports in order: once a later change is in the
	// history, so would the end be.
	if _, err := f.store.Grant(ctx, kvlease.GrantRequest{Name: "probe", Holder: "h", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitRecords(t, f.svc.History(), "probe", 1)
	recs, err := hist.Read(ctx, "stuck", time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Errorf("history of stuck: %+v; want its begin and one end", recs)
	}
	select {
	case m := <-events:
		t.Errorf("announced again: %s", m.Data)
	default:
	}
}

// watchThenSweep watches lease name (changes only), then starts a service
// on url whose observer ends overdue leases at once (grace 0, not 10 s:
// the leases lapsed seconds ago) and looks every 100 ms.
func watchThenSweep(t *testing.T, url, name string) (*kvlease.Watcher, fixture) {
	t.Helper()
	w, err := kvleasetest.OpenStore(t, url, kvlease.WithoutCreate()).Watch(t.Context(), name, kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	f := startOnStore(t, url, []kvlease.Option{kvlease.WithoutCreate(), kvlease.WithOverdueGrace(0)},
		grantor.DefaultConfig(), grantor.WithOverdueSweep(100*time.Millisecond))
	return w, f
}
