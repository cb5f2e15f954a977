package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// CatchUp applies the replay (and nothing after it), stops at apply's
// error, and fails with ErrUnavailable once ctx ends or the watch stops.
func TestWatcherCatchUp(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	var names []string
	for i := range 3 {
		n := fmt.Sprintf("cu.%d", i)
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: n, Holder: "h", Duration: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}

	t.Run("replay", func(t *testing.T) {
		w, err := st.Watch(ctx, "cu.")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		var got []string
		if err := w.CatchUp(ctx, func(ev kvlease.Event) error {
			got = append(got, ev.Name)
			return nil
		}); err != nil {
			t.Fatalf("CatchUp = %v", err)
		}
		if !slices.Equal(got, names) {
			t.Fatalf("CatchUp applied %v, want %v", got, names)
		}
		select {
		case <-w.Synced():
		default:
			t.Fatal("CatchUp returned before Synced closed")
		}
		// Later events stay in Events.
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "cu.late", Holder: "h", Duration: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
		kvleasetest.NextEvent(t, w, 5*time.Second, kvleasetest.OfType("cu.late", kvlease.EventGranted))
	})

	t.Run("apply's error", func(t *testing.T) {
		w, err := st.Watch(ctx, "cu.")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		stop := errors.New("stop")
		n := 0
		err = w.CatchUp(ctx, func(kvlease.Event) error {
			n++
			return stop
		})
		if err != stop || n != 1 {
			t.Fatalf("CatchUp = %v after %d events, want apply's error after 1", err, n)
		}
	})

	t.Run("stopped", func(t *testing.T) {
		w, err := st.Watch(ctx, "cu.")
		if err != nil {
			t.Fatal(err)
		}
		w.Stop()
		// The events buffered before Stop still come; then the closed
		// channel says the watch ended.
		err = w.CatchUp(ctx, func(kvlease.Event) error { return nil })
		if !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("CatchUp of a stopped watch = %v, want ErrUnavailable", err)
		}
	})

	t.Run("ctx ended", func(t *testing.T) {
		// More leases than the watcher buffers: its replay cannot end
		// before CatchUp reads, so it sees ctx's end first (each select
		// among ready cases is a coin toss; 300 tosses do not all land on
		// the events).
		for i := range 300 {
			if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("many.%d", i), Holder: "h", Duration: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		w, err := st.Watch(ctx, "many.")
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err = w.CatchUp(cctx, func(kvlease.Event) error { return nil })
		if !errors.Is(err, kvlease.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Fatalf("CatchUp with ctx ended = %v, want ErrUnavailable wrapping context.Canceled", err)
		}
	})
}

// A stopped watch deletes its consumer on the server, which would
// otherwise keep it, signalled on every write, for nats.go's 5 minutes.
func TestWatcherStopDeletesItsConsumer(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStoreOn(t, nc)
	deleted := kvleasetest.ConsumerDeletions(t, nc, "KV_"+st.Bucket())
	w, err := st.Watch(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	<-w.Synced()
	before := kvleasetest.ConsumerNames(t, st.JetStream(), "KV_"+st.Bucket())
	if len(before) != 1 {
		t.Fatalf("consumers while watching: %v, want the watch's", before)
	}
	w.Stop()
	// Deleted before Stop returned (it returned with the deletion still
	// on its way: the follower's own Stop, run when the watch's context
	// ended, had it, and the watch's second Stop did not wait for it).
	if left := kvleasetest.ConsumerNames(t, st.JetStream(), "KV_"+st.Bucket()); len(left) != 0 {
		t.Fatalf("consumers right after Stop: %v, want none", left)
	}
	select {
	case name := <-deleted:
		if name != before[0] {
			t.Errorf("deleted consumer %s, want %s", name, before[0])
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no advisory of consumer %s's deletion 10 s after Stop", before[0])
	}
}

// A watch whose consumer the server refuses with "stream not found" is
// unavailable, for its caller to ask again: a node that has just rejoined
// its cluster says so until its copy of the stream is there (the service's
// start, which retries only unavailability, gave up on it). Here the
// stream is deleted under an open Store, which the server answers alike.
func TestWatchOnAMissingStreamIsUnavailable(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	if err := st.JetStream().DeleteStream(t.Context(), "KV_"+st.Bucket()); err != nil {
		t.Fatal(err)
	}
	_, err := st.Watch(t.Context(), "", kvlease.UpdatesOnly())
	if !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("watch on a stream not found: %v, want ErrUnavailable", err)
	}
}

// The same once the watch has begun: the follower gives up on a stream
// not found several times in a row, and the watch ends unavailable, as it
// would have begun (it ended ErrBucket, "refused").
func TestWatchWhoseStreamGoesIsUnavailable(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	w, err := st.Watch(t.Context(), "", kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := st.JetStream().DeleteStream(t.Context(), "KV_"+st.Bucket()); err != nil {
		t.Fatal(err)
	}
	select {
	case ev, ok := <-w.Events():
		if ok {
			t.Fatalf("event %+v from a deleted stream", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch still open 30 s after its stream was deleted")
	}
	if err := w.Err(); !errors.Is(err, kvlease.ErrUnavailable) || !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("watch ended with %v, want ErrUnavailable wrapping jetstream.ErrStreamNotFound", err)
	}
}

// A release right after its grant rolls the grant up (history 1) before a
// watcher that is behind reads it; the release names the tenure, and the
// watcher reports the grant from it, just before the release: every end
// has its grant, with holder, duration and grant time (change events and
// the history dropped such grants under a fast grant-release load, found
// by an outside client).
func TestWatchReportsAGrantItsReleaseRolledUp(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	w, err := st.Watch(ctx, "fast.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	<-w.Synced()
	// Nobody reads the events meanwhile: once the channel is full the
	// watch stops reading the stream, and the tenures that follow are
	// rolled up by their releases before it reads on.
	const n = 400
	var last kvlease.Record
	for i := range n {
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "fast.a", Holder: fmt.Sprintf("h%d", i), Duration: 7 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "fast.a", Holder: rec.Holder, Token: rec.Token, Revision: rec.Revision}); err != nil {
			t.Fatal(err)
		}
		last = rec
	}
	granted := map[kvlease.Token]kvlease.Event{}
	ends, timeout := 0, time.After(15*time.Second)
	for {
		var ev kvlease.Event
		select {
		case ev = <-w.Events():
		case <-timeout:
			t.Fatalf("the release of the last tenure (token %d) never came (%d ends so far)", last.Token, ends)
		}
		switch {
		case ev.Type == kvlease.EventGranted:
			granted[ev.Token] = ev
			continue
		case !ev.Type.Ends():
			continue
		}
		ends++
		g, ok := granted[ev.Token]
		if !ok {
			t.Fatalf("the release of token %d (end %d) came with no grant before it", ev.Token, ends)
		}
		if g.Holder != ev.Holder || g.Record == nil || g.Record.Duration != 7*time.Second || g.GrantedAt.IsZero() {
			t.Fatalf("the grant reported for token %d: %+v (record %+v)", ev.Token, g, g.Record)
		}
		if ev.Token == last.Token {
			break
		}
	}
	if ends == n {
		t.Fatalf("all %d tenures were read as they came: the watch never fell behind, and the test showed nothing", n)
	}
	t.Logf("%d of %d tenures seen, each end with its grant", ends, n)
}

// ExactName watches one lease: neither the leases whose names begin with
// it nor those beside it in its token are delivered, in the replay or
// after (an election on "leader" replayed the whole bucket).
func TestWatchExactName(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	for _, n := range []string{"leader", "leaderboard", "leader.sub", "other"} {
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: n, Holder: "h", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := st.Watch(ctx, "leader", kvlease.ExactName())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	<-w.Synced()
	for _, n := range []string{"leaderboard", "leader.sub", "other"} {
		if _, err := st.Revoke(ctx, n, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Revoke(ctx, "leader", "test"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 2 {
		select {
		case ev := <-w.Events():
			got = append(got, fmt.Sprintf("%s %s", ev.Name, ev.Type))
		case <-time.After(10 * time.Second):
			t.Fatalf("events so far %v; want the replay of leader, then its revocation", got)
		}
	}
	if want := []string{"leader granted", "leader revoked"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if _, err := st.Watch(ctx, "leader.*", kvlease.ExactName()); !errors.Is(err, kvlease.ErrInvalidName) {
		t.Errorf("an exact watch of no lease name: %v, want ErrInvalidName", err)
	}
}

// A watch whose bucket is deleted and made anew (a NATS server restarted
// on an empty store) ends with ErrBucketReplaced: the new bucket's
// revisions started again below where the watch was, and it waited for
// good, silent through every grant and expiry on the new bucket (found by
// an outside client).
func TestWatchEndsWhenTheBucketIsReplaced(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	for i := range 3 {
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("old.%d", i), Holder: "h", Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := st.Watch(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := w.CatchUp(ctx, func(kvlease.Event) error { return nil }); err != nil {
		t.Fatal(err)
	}
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	if err := js.DeleteKeyValue(ctx, kvlease.DefaultBucket); err != nil {
		t.Fatal(err)
	}
	fresh := kvleasetest.OpenStore(t, srv.ClientURL()) // makes the bucket anew
	if _, err := fresh.Grant(ctx, kvlease.GrantRequest{Name: "new.0", Holder: "h", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case _, ok := <-w.Events():
			if ok {
				continue
			}
			if err := w.Err(); !errors.Is(err, kvlease.ErrBucketReplaced) || !errors.Is(err, kvlease.ErrBucket) {
				t.Fatalf("the watch ended with %v, want ErrBucketReplaced", err)
			}
			return
		case <-timeout:
			t.Fatal("the watch of the replaced bucket still runs 30 s on")
		}
	}
}

// A watch cut off from the server while a tenure lapsed, until its expiry
// marker had lapsed too (1 s marker TTL here), kept the tenure live for
// good once it could reach the server again: its consumer, made anew,
// resumes after the last message it had, and nothing left in the stream
// says the tenure ended (`leased watch` and a registry showed the lapsed
// lease as live). The watch now reads the leases it holds live when it
// resumes after such a gap and reports the end of those gone, as an
// expiry not seen; a lease that stayed live across the cut, renewed
// meanwhile, is not ended.
func TestWatchReportsAnEndMissedInAPartition(t *testing.T) {
	srv, st := kvleasetest.NewStore(t, kvlease.WithMarkerTTL(time.Second))
	p := kvleasetest.NewProxy(t, srv.Addr())
	far := kvleasetest.OpenStore(t, p.URL(), kvlease.WithMarkerTTL(time.Second))
	ctx := t.Context()
	short, err := st.Grant(ctx, kvlease.GrantRequest{Name: "part.short", Holder: "a", Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	long, err := st.Grant(ctx, kvlease.GrantRequest{Name: "part.long", Holder: "b", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	w, err := far.Watch(ctx, "part.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := map[string]bool{}
	if err := w.CatchUp(ctx, func(ev kvlease.Event) error { seen[ev.Name] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !seen["part.short"] || !seen["part.long"] {
		t.Fatalf("replay: %v, want both leases", seen)
	}
	// The lapse, seen on a direct connection.
	near, err := st.Watch(ctx, "part.short", kvlease.ExactName(), kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer near.Stop()
	p.Cut()
	if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: "part.long", Holder: "b", Token: long.Token,
		Revision: long.Revision, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	kvleasetest.NextEvent(t, near, 10*time.Second, kvleasetest.OfType("part.short", kvlease.EventExpired))
	kvleasetest.WaitEmpty(t, st, "part.short", 10*time.Second) // the marker lapses by its own TTL
	p.Heal()
	ev := kvleasetest.NextEvent(t, w, 15*time.Second, func(ev kvlease.Event) bool {
		if ev.Name == "part.long" && ev.Type.Ends() {
			t.Errorf("the lease live across the cut was ended: %+v", ev)
		}
		return ev.Name == "part.short"
	})
	if ev.Type != kvlease.EventExpired || ev.Token != short.Token || ev.Holder != "a" || ev.Reason != kvlease.UnseenEndReason {
		t.Fatalf("after the cut: %v token %d holder %q reason %q; want the expiry of token %d (a), not seen",
			ev.Type, ev.Token, ev.Holder, ev.Reason, short.Token)
	}
	// Nothing ends the long lease: a grant after everything else marks
	// the end of what the watch reports.
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "part.z", Holder: "c", Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	kvleasetest.NextEvent(t, w, 10*time.Second, func(ev kvlease.Event) bool {
		if ev.Name == "part.long" && ev.Type.Ends() {
			t.Errorf("the lease live across the cut was ended: %+v", ev)
		}
		return ev.Name == "part.z" && ev.Type == kvlease.EventGranted
	})
	if rec, err := st.Get(ctx, "part.long"); err != nil || rec.Token != long.Token {
		t.Fatalf("part.long: %v %v; want still held", rec, err)
	}
}

// A watch with UpdatesOnly that saw a tenure live, cut off while that
// tenure ended and the next one was granted and renewed (history 1: the
// renewal replaced the grant), reported the new tenure as "renewed", a
// renewal of a tenure it had never seen granted, under another token than
// the one it had live (found by an outside client: `leased watch
// --updates-only` through a partition printed renewals whose token
// changed). Having seen the tenure before it, the watch knows the token
// changed: the new tenure is a grant, as a watch with the state reports it.
func TestWatchUpdatesOnlyReportsANewTenureAsAGrant(t *testing.T) {
	ctx := t.Context()
	st, w, p, a, b := cutWhileATenureEnds(t, "uo.x", kvlease.UpdatesOnly())
	if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: "uo.x", Holder: "b", Token: b.Token,
		Revision: b.Revision, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	ev := kvleasetest.NextEvent(t, w, 15*time.Second, func(ev kvlease.Event) bool {
		return ev.Name == "uo.x" && ev.Token == b.Token
	})
	if ev.Type != kvlease.EventGranted || ev.Holder != "b" {
		t.Fatalf("tenure %d (b), granted and renewed while the watch was cut off: %v holder %q; want granted (the watch had tenure %d live)",
			b.Token, ev.Type, ev.Holder, a.Token)
	}
}

// A watch cut off while the tenure it had live was released, and another
// was granted and released, read only the grant after them, which carries
// the second one's tombstone: it reported that release, the end of a
// tenure it never saw granted, and dropped the tenure it had live
// unended (found by an outside client, folding the events of a watch
// through a kvleasetest.Proxy cut). The grant's tombstone is reported as
// an end only for the tenure the watcher has live.
func TestWatchReportsNoEndOfATenureItNeverSaw(t *testing.T) {
	ctx := t.Context()
	st, w, p, a, b := cutWhileATenureEnds(t, "gap.x")
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "gap.x", Holder: "b", Token: b.Token, Revision: b.Revision}); err != nil {
		t.Fatal(err)
	}
	c, err := st.Grant(ctx, kvlease.GrantRequest{Name: "gap.x", Holder: "c", Duration: time.Minute}) // carries b's tombstone
	if err != nil {
		t.Fatal(err)
	}
	p.Heal()
	kvleasetest.NextEvent(t, w, 15*time.Second, func(ev kvlease.Event) bool {
		if ev.Name == "gap.x" && ev.Token == b.Token {
			t.Errorf("%v of tenure %d (b), which the watch never saw granted; it had tenure %d (a) live", ev.Type, b.Token, a.Token)
		}
		return ev.Name == "gap.x" && ev.Token == c.Token
	})
}

// A watch with UpdatesOnly that had a tenure live, cut off while it was
// released and the next one granted and released at once (the release
// rolled up the grant), reported that release alone: the end of a tenure
// it never saw granted (found by an outside client). Having seen the
// tenure before it, it knows the ended one began after it, and reports
// its grant first, as a watch with the state does.
func TestWatchUpdatesOnlyReportsARolledUpGrant(t *testing.T) {
	ctx := t.Context()
	st, w, p, a, b := cutWhileATenureEnds(t, "ru.x", kvlease.UpdatesOnly())
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "ru.x", Holder: "b", Token: b.Token, Revision: b.Revision}); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	ev := kvleasetest.NextEvent(t, w, 15*time.Second, func(ev kvlease.Event) bool { return ev.Name == "ru.x" && ev.Token == b.Token })
	if ev.Type != kvlease.EventGranted || ev.Holder != "b" {
		t.Fatalf("first event of tenure %d (b), granted and released while the watch was cut off: %v; want its grant (the watch had tenure %d live)",
			b.Token, ev.Type, a.Token)
	}
	if ev := kvleasetest.NextEvent(t, w, 10*time.Second, func(ev kvlease.Event) bool { return ev.Name == "ru.x" }); ev.Type != kvlease.EventReleased || ev.Token != b.Token {
		t.Fatalf("after the grant of tenure %d: %v of token %d; want its release", b.Token, ev.Type, ev.Token)
	}
}

// A watch with UpdatesOnly cut off while a lease was granted and renewed
// (the renewal replaced the grant) reported the tenure as renewed, and one
// granted and released (the release rolled up the grant) by its release
// alone, unless it had seen an earlier tenure of the lease live: a watch
// that had seen the lease end before reported the next tenure as a
// renewal. Every tenure whose token is past where the watch began was
// granted since, so the watch knows it is new: it reports its grant, as a
// watch with the state does. A tenure granted before the watch began is
// still only renewed.
func TestWatchUpdatesOnlyReportsTenuresGrantedSinceAsGrants(t *testing.T) {
	ctx := t.Context()
	srv, st := kvleasetest.NewStore(t)
	p := kvleasetest.NewProxy(t, srv.Addr())
	far := kvleasetest.OpenStore(t, p.URL())
	grant := func(name string) kvlease.Record {
		t.Helper()
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	renew := func(rec kvlease.Record) {
		t.Helper()
		if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: rec.Name, Holder: "h", Token: rec.Token,
			Revision: rec.Revision, Duration: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	old, ended := grant("since.old"), grant("since.ended")
	w, err := far.Watch(ctx, "since.", kvlease.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "since.ended", Holder: "h", Token: ended.Token, Revision: ended.Revision}); err != nil {
		t.Fatal(err)
	}
	kvleasetest.NextEvent(t, w, 10*time.Second, kvleasetest.OfType("since.ended", kvlease.EventReleased))
	p.Cut()
	renew(grant("since.ended")) // the watch saw the lease end, then this
	renew(grant("since.x"))
	y := grant("since.y")
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: "since.y", Holder: "h", Token: y.Token, Revision: y.Revision}); err != nil {
		t.Fatal(err)
	}
	renew(old)
	p.Heal()
	seen := map[string][]kvlease.EventType{}
	kvleasetest.NextEvent(t, w, 15*time.Second, func(ev kvlease.Event) bool {
		seen[ev.Name] = append(seen[ev.Name], ev.Type)
		return ev.Name == "since.old"
	})
	want := map[string][]kvlease.EventType{
		"since.ended": {kvlease.EventGranted},
		"since.x":     {kvlease.EventGranted},
		"since.y":     {kvlease.EventGranted, kvlease.EventReleased},
		"since.old":   {kvlease.EventRenewed},
	}
	for name, types := range want {
		if fmt.Sprint(seen[name]) != fmt.Sprint(types) {
			t.Errorf("%s: the watch reported %v; want %v", name, seen[name], types)
		}
	}
}

// cutWhileATenureEnds watches name's prefix (up to its first dot) through
// a proxy with opts, grants name to "a" and waits until the watch has
// seen it, then cuts the watch off, releases a's tenure and grants name
// to "b". It returns the store, the watch (stopped when the test ends),
// the proxy to heal, and the two tenures.
func cutWhileATenureEnds(t *testing.T, name string, opts ...kvlease.WatchOption) (*kvlease.Store, *kvlease.Watcher, *kvleasetest.Proxy, kvlease.Record, kvlease.Record) {
	t.Helper()
	srv, st := kvleasetest.NewStore(t)
	p := kvleasetest.NewProxy(t, srv.Addr())
	far := kvleasetest.OpenStore(t, p.URL())
	ctx := t.Context()
	w, err := far.Watch(ctx, name[:strings.Index(name, ".")+1], opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	a, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "a", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	kvleasetest.NextEvent(t, w, 10*time.Second, kvleasetest.OfType(name, kvlease.EventGranted))
	p.Cut()
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: name, Holder: "a", Token: a.Token, Revision: a.Revision}); err != nil {
		t.Fatal(err)
	}
	b, err := st.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "b", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return st, w, p, a, b
}

// A watch says it is cut off while it is: Interrupts receives a value and
// Interrupted reports true from when the connection is lost, or its
// consumer's heartbeats are missed, whichever comes first, until it
// follows again. Cut off by a server that went away (the connection
// closed, nats.go reconnecting), it said nothing until the connection came
// back: Interrupted was false and Interrupts silent for the whole cut,
// and a reader (an election's candidate, `leased watch`) could not tell a
// quiet bucket from a server it could not reach (found in review: a cut of
// 15 s gave no interrupt). Blackholed, the connection looks up until its
// pings go unanswered, and the missed heartbeats say it. A handler the
// connection's owner set is called as before.
func TestWatchSaysItIsCutOff(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  func(srv *kvleasetest.Server, p *kvleasetest.Proxy)
		heal func(t *testing.T, srv *kvleasetest.Server, p *kvleasetest.Proxy)
	}{
		{"server gone", func(srv *kvleasetest.Server, _ *kvleasetest.Proxy) { srv.Shutdown() },
			func(t *testing.T, srv *kvleasetest.Server, _ *kvleasetest.Proxy) {
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
			}},
		{"blackholed", func(_ *kvleasetest.Server, p *kvleasetest.Proxy) { p.Cut() },
			func(_ *testing.T, _ *kvleasetest.Server, p *kvleasetest.Proxy) { p.Heal() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := kvleasetest.NewServer(t, kvleasetest.WithPort(kvleasetest.FreePort(t)))
			p := kvleasetest.NewProxy(t, srv.Addr())
			lost := make(chan struct{}, 1)
			nc := kvleasetest.Connect(t, p.URL(), append(kvlease.ConnOptions(),
				nats.DisconnectErrHandler(func(*nats.Conn, error) {
					select {
					case lost <- struct{}{}:
					default:
					}
				}))...)
			w := kvleasetest.Watch(t, kvleasetest.OpenStoreOn(t, nc), "cut.")
			if w.Interrupted() {
				t.Fatal("interrupted while following")
			}
			cut := time.Now()
			tc.cut(srv, p)
			// Two heartbeats missed, and a moment to see it.
			within := 3 * kvlease.WatchHeartbeat
			select {
			case <-w.Interrupts():
			case <-time.After(within):
				t.Fatalf("no interrupt %v into the cut (interrupted %v, connection %v)", within, w.Interrupted(), nc.Status())
			}
			// Still cut off past the time a reconnect would take.
			for time.Since(cut) < 6*kvlease.WatchHeartbeat {
				if !w.Interrupted() {
					t.Fatalf("not interrupted %v into the cut (connection %v)", time.Since(cut).Round(time.Millisecond), nc.Status())
				}
				time.Sleep(100 * time.Millisecond)
			}
			select {
			case <-lost:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection's own disconnect handler was not called")
			}
			tc.heal(t, srv, p)
			st := kvleasetest.OpenStore(t, srv.ClientURL())
			if _, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "cut.after", Holder: "h", Duration: time.Minute}); err != nil {
				t.Fatal(err)
			}
			kvleasetest.NextEvent(t, w, 20*time.Second, kvleasetest.OfType("cut.after", kvlease.EventGranted))
			if w.Interrupted() {
				t.Fatal("interrupted once following again")
			}
		})
	}
}
