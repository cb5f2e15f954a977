package grantor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	restarted := time.Now()

	// The end is reported when the record expired, not when the observer
	// found it kept: the history of leases released long before an
	// unclean restart showed them held until it (found by an outside
	// client).
	w, f := watchThenSweep(t, srv.URL, "stuck")
	select {
	case ev := <-w.Events():
		if ev.Type != kvlease.EventExpired || ev.Token != stuck.Token || ev.Holder != "old" || !ev.Time.Before(restarted) {
			t.Errorf("the change after the restart at %v: %+v; want the expiry of old's tenure %d, at its TTL", restarted, ev, stuck.Token)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("nothing ended the lease the server kept (%v)", w.Err())
	}
	end := waitRecords(t, f.svc.History(), "stuck", 1)[0]
	if end.Kind != history.KindEnded || end.EndedBy != history.EndExpired || end.Token != uint64(stuck.Token) ||
		end.Holder != "old" || end.Reason == "" || !end.Time.Before(restarted) {
		t.Errorf("the history's record of the end (restart at %v): %+v", restarted, end)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if got, err := f.store.Get(rctx, "stuck"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("the lease after the observer ended it: %+v, %v", got, err)
	}
}

// A grant that takes over a lease the server kept past its TTL carries
// the kept record's end, an expiry at its TTL; the history records that
// end, not one of cause "unknown" at the new grant. Found by an outside
// client: serve SIGKILLed and restarted on its data, the first grant of
// such a lease was seen by watches to end the old tenure at its TTL, while
// `leased history` showed it ended "unknown" at the new grant, 13 s later.
// An observer already on the service's watch (observed) skipped the end:
// it comes just before the grant, with the kept record's own revision,
// which the observer's own watch had passed (as the live record), so it
// recorded an end of cause unknown. One whose watch began after the grant
// (granted first) never saw the old tenure and recorded no end at all (the
// history's fold ended it "unknown" at the new grant): it now takes the
// end from the grant, which carries it.
func TestObserverRecordsTheExpiryAGrantOverAKeptLeaseCarries(t *testing.T) {
	for _, observed := range []bool{true, false} {
		t.Run(map[bool]string{true: "observed", false: "granted first"}[observed], func(t *testing.T) {
			srv := kvleasetest.StartChildServer(t)
			ctx := t.Context()
			st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
			old, err := st.Grant(ctx, kvlease.GrantRequest{Name: "stuck", Holder: "old", Duration: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			// The history as the observer of the old grant left it, killed
			// with the server: the begin, no end.
			nc := kvleasetest.Connect(t, srv.URL)
			begunInHistory(t, nc, old)
			srv.LoseExpiries(st, "stuck")
			restarted := time.Now()
			events := &eventLog{ch: make(chan api.ChangeEvent, 4)}
			kvleasetest.Subscribe(t, nc, api.SubjectEvents+"stuck", func(m *nats.Msg) {
				var ev api.ChangeEvent
				if json.Unmarshal(m.Data, &ev) == nil {
					events.ch <- ev
				}
			})

			// Reads take the kept record as lapsed at once (grace 0), and the
			// observer does not sweep in the test's time: the grant ends it.
			storeOpts := []kvlease.Option{kvlease.WithoutCreate(), kvlease.WithOverdueGrace(0)}
			grant := kvlease.GrantRequest{Name: "stuck", Holder: "new", Duration: time.Minute}
			var f fixture
			if observed {
				onFeed := make(chan struct{})
				var once sync.Once
				f = startOnStore(t, srv.URL, storeOpts, grantor.DefaultConfig(), grantor.WithOverdueSweep(time.Hour),
					grantor.WithFeedHook(0, func(on bool) {
						if on {
							once.Do(func() { close(onFeed) })
						}
					}))
				select {
				case <-onFeed:
				case <-time.After(15 * time.Second):
					t.Fatal("the observer did not move to the service's watch")
				}
				if _, err := f.client.Grant(ctx, grant); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := kvleasetest.OpenStore(t, srv.URL, storeOpts...).Grant(ctx, grant); err != nil {
					t.Fatal(err)
				}
				f = startOnStore(t, srv.URL, storeOpts, grantor.DefaultConfig(), grantor.WithOverdueSweep(time.Hour))
			}

			recs := recordsThrough(t, f.svc.History(), "stuck", func(r history.Record) bool { return r.Holder == "new" })
			if len(recs) != 3 {
				t.Fatalf("history of stuck: %+v; want old's begin and end, new's begin", recs)
			}
			// The end is the kept record's expiry (its StoredAt is the
			// server's, old's the acknowledgement's here: about the same).
			end := recs[1]
			if end.Kind != history.KindEnded || end.EndedBy != history.EndExpired || end.Token != uint64(old.Token) ||
				end.Holder != "old" || end.Reason == "" || !end.Time.Before(restarted) ||
				end.Time.Sub(old.ExpiresAt()).Abs() > time.Second {
				t.Errorf("the end of old's tenure (expired at about %v, restart at %v): %+v", old.ExpiresAt(), restarted, end)
			}
			if tenures := history.Fold(recs); tenures[0].EndedBy != history.EndExpired || tenures[0].Held(time.Now()) > 2*time.Second {
				t.Errorf("old's tenure: %+v; want expired after about 1 s", tenures[0])
			}
			// Announced, as an expiry, before the new grant (an end of
			// cause unknown is not announced).
			if got := events.next(t, 2); got[0].Type != "expired" || got[0].Token != uint64(old.Token) || got[1].Holder != "new" {
				t.Errorf("announced %+v; want the expiry of old's tenure %d, then new's grant", got, old.Token)
			}
		})
	}
}

// begunInHistory writes the history as an observer left it for tenure
// rec that it saw begin: its begin only.
func begunInHistory(t *testing.T, nc *nats.Conn, rec kvlease.Record) {
	t.Helper()
	js := kvleasetest.JetStream(t, nc)
	if _, err := history.Open(t.Context(), js, kvlease.DefaultBucket, history.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(history.Granted(rec))
	if _, err := js.Publish(t.Context(), history.Subject(kvlease.DefaultBucket, rec.Name), b); err != nil {
		t.Fatal(err)
	}
}

// recordsThrough follows h until a record of a lease under prefix
// satisfies last and returns the records up to it.
func recordsThrough(t *testing.T, h *history.Stream, prefix string, last func(history.Record) bool) []history.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	var recs []history.Record
	err := h.Follow(ctx, prefix, time.Now().Add(-time.Hour), func(r history.Record, caughtUp bool) bool {
		if caughtUp {
			return true
		}
		recs = append(recs, r)
		return !last(r)
	})
	if err != nil {
		t.Fatalf("history of %s up to the record awaited: %v (%+v)", prefix, err, recs)
	}
	return recs
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
	nc := kvleasetest.Connect(t, srv.URL)
	hist := endedInHistory(t, nc, stuck, history.EndExpired)
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

// endedInHistory writes the history as an observer left it for tenure
// rec: its begin and its end (by cause), appended without ids, as they
// are to a stream past its duplicates window.
func endedInHistory(t *testing.T, nc *nats.Conn, rec kvlease.Record, cause string) *history.Stream {
	t.Helper()
	js := kvleasetest.JetStream(t, nc)
	hist, err := history.Open(t.Context(), js, kvlease.DefaultBucket, history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []history.Record{
		{Kind: history.KindGranted, Name: rec.Name, Token: uint64(rec.Token), Holder: rec.Holder, Revision: rec.Revision, Time: rec.GrantedAt},
		{Kind: history.KindEnded, Name: rec.Name, Token: uint64(rec.Token), Holder: rec.Holder, Revision: rec.Revision + 1,
			Time: rec.GrantedAt.Add(time.Second), GrantedAt: rec.GrantedAt, EndedBy: cause},
	} {
		b, _ := json.Marshal(r)
		if _, err := js.Publish(t.Context(), history.Subject(kvlease.DefaultBucket, rec.Name), b); err != nil {
			t.Fatal(err)
		}
	}
	return hist
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

// A released tenure that the server brought back over an unclean restart
// (its tombstone had lapsed: kvleasetest.ChildServer.LoseExpiries) is
// live until its own expiry, here ten minutes: the lease was refused to
// others as held by its old holder, and an election's Observe showed a
// leader that had resigned (found by an outside client, 3 of 3 times). The
// observer, whose history has the tenure's end, ends it at once; the
// history keeps its one end, and nothing is announced again. A watch that
// saw the tenure come back sees it end; one that did not, sees nothing.
func TestObserverEndsAReleasedTenureTheServerBroughtBack(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	rec := grantReleased(t, st, "back")
	srv.LoseExpiries(st, "back")
	reader := kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate())
	back, err := reader.Get(ctx, "back") // as the bucket has it: its times the server's
	if err != nil || back.Token != rec.Token {
		t.Fatalf("brought back: %+v, %v; want tenure %d", back, err, rec.Token)
	}
	nc := kvleasetest.Connect(t, srv.URL)
	endedInHistory(t, nc, back, history.EndReleased)
	events := make(chan *nats.Msg, 4)
	kvleasetest.Subscribe(t, nc, api.SubjectEvents+"back", func(m *nats.Msg) { events <- m })
	state, err := reader.Watch(ctx, "back", kvlease.ExactName())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(state.Stop)
	if ev := kvleasetest.NextEvent(t, state, 10*time.Second, kvleasetest.OfType("back", kvlease.EventGranted)); ev.Token != rec.Token {
		t.Fatalf("brought back: %+v; want tenure %d", ev, rec.Token)
	}
	changes, err := reader.Watch(ctx, "back", kvlease.ExactName(), kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(changes.Stop)

	f := startOnStore(t, srv.URL, []kvlease.Option{kvlease.WithoutCreate()}, grantor.DefaultConfig(),
		grantor.WithOverdueSweep(100*time.Millisecond))
	ev := kvleasetest.NextEvent(t, state, 15*time.Second, kvleasetest.OfType("back", kvlease.EventRevoked))
	if ev.Token != rec.Token || ev.Reason != kvlease.ResurrectedReason {
		t.Fatalf("the end: %+v; want tenure %d ended with the reason %q", ev, rec.Token, kvlease.ResurrectedReason)
	}
	if _, err := f.store.Grant(ctx, kvlease.GrantRequest{Name: "back", Holder: "new", Duration: time.Minute}); err != nil {
		t.Fatalf("grant after the end: %v", err)
	}
	// The observer reports in order: the new tenure's begin is in the
	// history, so would a second end of the old one be.
	recs := waitRecords(t, f.svc.History(), "back", 3)
	if len(recs) != 3 || recs[2].Kind != history.KindGranted || recs[2].Holder != "new" {
		t.Errorf("history of back: %+v; want the old tenure's begin and one end, then the new one's begin", recs)
	}
	select {
	case ev := <-changes.Events():
		if ev.Type != kvlease.EventGranted || ev.Holder != "new" {
			t.Errorf("a watch that did not see the tenure come back saw %+v; want only the new grant", ev)
		}
	case <-time.After(10 * time.Second):
		t.Error("the new grant did not reach the watch of changes")
	}
	// Announced in order: anything before the new grant's would be a
	// second announcement of the old tenure's end.
	select {
	case m := <-events:
		if !strings.Contains(string(m.Data), `"new"`) {
			t.Errorf("announced: %s; want only the new grant", m.Data)
		}
	case <-time.After(10 * time.Second):
		t.Error("the new grant was not announced")
	}
}

// An unclean restart that brings back many ended tenures is logged in a
// few lines, not one per lease: an outside client's run logged 3,001.
// (A check JetStream does not answer is retried in a later pass, which
// logs its own lines: the count is over all passes.)
func TestObserverLogsManyBroughtBackInAFewLines(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	nc := kvleasetest.Connect(t, srv.URL)
	var names []string
	for i := range 12 {
		name := fmt.Sprintf("crowd.%d", i)
		endedInHistory(t, nc, grantReleased(t, st, name), history.EndReleased)
		names = append(names, name)
	}
	srv.LoseExpiries(st, names...)
	const msg = "ended a lease the NATS server brought back after it had ended"
	log := logRecords{msgs: []string{msg}, out: make(chan slog.Record, 100)}
	checked := make(chan bool, 100)
	startOnStore(t, srv.URL, []kvlease.Option{kvlease.WithoutCreate()}, grantor.DefaultConfig(),
		grantor.WithOverdueSweep(100*time.Millisecond), grantor.WithLogger(slog.New(log)),
		grantor.WithEndCheckedHook(func(_ kvlease.Record, ended bool, _ error) { checked <- ended }))
	lines, ended, counted := 0, 0, int64(0)
	for timeout := time.After(30 * time.Second); ended < len(names) || counted == 0; {
		select {
		case r := <-log.out:
			lines++
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "leases" {
					counted += a.Value.Int64()
				}
				return true
			})
		case e := <-checked:
			if e {
				ended++
			}
		case <-timeout:
			t.Fatalf("%d of %d brought back ended, %d lines, %d counted in summary lines", ended, len(names), lines, counted)
		}
	}
	if lines >= len(names) {
		t.Fatalf("%d lines for the %d leases brought back; want a few, with a count", lines, len(names))
	}
}

// The history is evidence of an end only for the tenure it names: a live
// tenure is not ended for a history record with its token but another
// holder or grant time, nor for a later token recorded before its grant
// (a bucket made anew, or restored, issues tokens the history has seen
// before: found in review, where such a tenure was ended with its holder
// still at work). Its revocation reason cannot be forged: revoke refuses
// kvlease.ResurrectedReason.
func TestObserverEndsNoLiveTenureForAnotherTenuresHistory(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	nc := kvleasetest.Connect(t, srv.ClientURL())
	js := kvleasetest.JetStream(t, nc)
	if _, err := history.Open(ctx, js, kvlease.DefaultBucket, history.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	live := map[string]kvlease.Record{}
	for _, name := range []string{"fp.same-token", "fp.later-token"} {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		live[name] = rec
	}
	// Revisions above the bucket's: the observer replays the live
	// tenures as state, as it would after a restart.
	for _, r := range []history.Record{
		{Kind: history.KindEnded, Name: "fp.same-token", Token: uint64(live["fp.same-token"].Token), Holder: "someone-else",
			Revision: 100, Time: time.Now().Add(-time.Hour), GrantedAt: time.Now().Add(-2 * time.Hour), EndedBy: history.EndReleased},
		{Kind: history.KindEnded, Name: "fp.later-token", Token: 1000, Holder: "h",
			Revision: 101, Time: time.Now().Add(-time.Hour), GrantedAt: time.Now().Add(-2 * time.Hour), EndedBy: history.EndReleased},
	} {
		b, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, history.Subject(kvlease.DefaultBucket, r.Name), b); err != nil {
			t.Fatal(err)
		}
	}
	checked := make(chan kvlease.Record, 8)
	f := startOnStore(t, srv.ClientURL(), []kvlease.Option{kvlease.WithoutCreate()}, grantor.DefaultConfig(),
		grantor.WithOverdueSweep(100*time.Millisecond), grantor.WithEndCheckedHook(func(rec kvlease.Record, ended bool, err error) {
			if err != nil {
				return // checked again
			}
			if ended {
				t.Errorf("ended live tenure %s (token %d)", rec.Name, rec.Token)
			}
			checked <- rec
		}))
	for range live {
		select {
		case <-checked:
		case <-time.After(15 * time.Second):
			t.Fatal("the observer did not check the live tenures against the history")
		}
	}
	for name, rec := range live {
		if cur, err := st.Get(ctx, name); err != nil || cur.Token != rec.Token {
			t.Errorf("%s: %+v, %v; want tenure %d live", name, cur, err, rec.Token)
		}
	}
	if _, err := st.Revoke(ctx, "fp.same-token", kvlease.ResurrectedReason); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("Store.Revoke with the grantor's own reason: %v, want ErrInvalidOption", err)
	}
	if _, err := f.client.Revoke(ctx, "fp.same-token", kvlease.ResurrectedReason); !errors.Is(err, api.ErrInvalidRequest) {
		t.Errorf("revoke through the service with the grantor's own reason: %v, want invalid_argument", err)
	}
	// A reason is bounded: it is copied into every event and the history.
	long := strings.Repeat("r", kvlease.MaxReasonLen+1)
	if _, err := st.Revoke(ctx, "fp.same-token", long); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("Store.Revoke with a reason of %d bytes: %v, want ErrInvalidOption", len(long), err)
	}
	if _, err := f.client.Revoke(ctx, "fp.same-token", long); !errors.Is(err, api.ErrInvalidRequest) {
		t.Errorf("revoke through the service with a reason of %d bytes: %v, want invalid_argument", len(long), err)
	}
	if cur, err := st.Get(ctx, "fp.same-token"); err != nil || cur.Token != live["fp.same-token"].Token {
		t.Errorf("after the refused revocations: %+v, %v; want the tenure live", cur, err)
	}
}

// grantReleased grants lease name to "old" for 10 min through st and
// releases it: a tenure the server may bring back (LoseExpiries).
func grantReleased(t *testing.T, st *kvlease.Store, name string) kvlease.Record {
	t.Helper()
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: name, Holder: "old", Duration: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(t.Context(), kvlease.ReleaseRequest{Name: name, Holder: "old", Token: rec.Token, Revision: rec.Revision}); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A server the service reaches with --nats-url can stop uncleanly while
// the observer runs: the released tenure it brings back is ended as one
// found at a takeover is, without the observer changing hands.
func TestObserverEndsATenureItsServerBroughtBackWhileItObserved(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	f := startOnStore(t, srv.URL, []kvlease.Option{kvlease.WithoutCreate()}, grantor.DefaultConfig(),
		grantor.WithOverdueSweep(100*time.Millisecond))
	rec := grantReleased(t, st, "back")
	waitRecords(t, f.svc.History(), "back", 2)
	srv.LoseExpiries(st, "back")
	reader := kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate())
	state, err := reader.Watch(ctx, "back", kvlease.ExactName())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(state.Stop)
	ev := kvleasetest.NextEvent(t, state, 20*time.Second, kvleasetest.OfType("back", kvlease.EventRevoked))
	if ev.Token != rec.Token || ev.Reason != kvlease.ResurrectedReason {
		t.Fatalf("the end: %+v; want tenure %d ended with the reason %q", ev, rec.Token, kvlease.ResurrectedReason)
	}
	if recs := waitRecords(t, f.svc.History(), "back", 2); len(recs) != 2 {
		t.Errorf("history of back: %+v; want the tenure's begin and one end", recs)
	}
	// The tenures live across the restarts stay so.
	for _, name := range []string{"kvleasetest.after.0", "kvleasetest.later.0"} {
		if rec, err := reader.Get(ctx, name); err != nil || rec.Holder != "h" {
			t.Errorf("%s after the check: %+v, %v; want it held by h", name, rec, err)
		}
	}
}

// A tenure whose check failed is checked again at the next sweep: the
// first comes just after the unclean restart that often made the observer,
// when JetStream may not answer yet (found in review: checked once, such a
// tenure stayed held by its old holder until its own expiry). Here the
// server is paused during the first check.
func TestObserverChecksAgainATenureWhoseCheckFailed(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	grantReleased(t, st, "back")
	srv.LoseExpiries(st, "back")
	back, err := kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate()).Get(ctx, "back")
	if err != nil {
		t.Fatal(err)
	}
	// The history ends at the bucket's last revision, so that the
	// observer has nothing to record (a record waits for the server, and
	// the observer with it, without a sweep).
	last, err := st.LastRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inHistory := back
	inHistory.Revision = last - 1
	endedInHistory(t, kvleasetest.Connect(t, srv.URL), inHistory, history.EndReleased)
	var pause sync.Once
	resumed := make(chan struct{})
	ended := make(chan bool, 4)
	// Started on a connection made before: the pause may come while it
	// starts, and a new connection would wait for it.
	startOnConnStore(t, kvleasetest.Connect(t, srv.URL), []kvlease.Option{kvlease.WithoutCreate()}, grantor.DefaultConfig(),
		grantor.WithOverdueSweep(500*time.Millisecond),
		grantor.WithHistoryLinger(0, func(rev uint64) {
			if rev == back.Revision {
				pause.Do(srv.Pause) // replayed; its check comes at the first sweep
			}
		}),
		grantor.WithEndCheckedHook(func(rec kvlease.Record, e bool, err error) {
			switch {
			case rec.Name != "back":
			case err != nil:
				select {
				case <-resumed:
				default:
					srv.Resume()
					close(resumed)
				}
			default:
				ended <- e
			}
		}))
	select {
	case <-resumed:
	case <-time.After(15 * time.Second):
		srv.Resume()
		t.Fatal("the first check did not fail while the server was paused")
	}
	select {
	case e := <-ended:
		if !e {
			t.Fatal("checked again: not ended")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the tenure whose check failed was not checked again")
	}
	if _, err := st.Get(ctx, "back"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("back after the check: %v; want not found", err)
	}
}
