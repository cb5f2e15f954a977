package grantor

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/atomicbatch"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
)

func TestEndCause(t *testing.T) {
	for _, c := range []struct {
		ev   kvlease.Event
		want string
	}{
		{kvlease.Event{Type: kvlease.EventReleased}, history.EndReleased},
		{kvlease.Event{Type: kvlease.EventExpired}, history.EndExpired},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: "stuck"}, history.EndRevoked},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: history.GossipReasonPrefix + "node declared dead: web-1"}, history.EndRemoved},
	} {
		if got := endCause(c.ev); got != c.want {
			t.Errorf("endCause(%v %q) = %s, want %s", c.ev.Type, c.ev.Reason, got, c.want)
		}
	}
}

// An end of a later tenure than the one the observer has open (its watch
// lagged past the open one's end and the later one's begin: the bucket
// keeps one entry per lease) records the open one's end too, cause
// unknown, and the later one's with its own holder and cause.
func TestObserverEndOfAnUnseenTenure(t *testing.T) {
	o, _ := testObserver(t)
	ctx, hist := t.Context(), o.hist
	now := time.Now()
	open := map[string]*openTenure{"gap.a": {token: 2, renewals: 1}}
	end := kvlease.Event{Type: kvlease.EventRevoked, Name: "gap.a", Revision: 6, Time: now, Holder: "h2", Token: 5,
		GrantedAt: now.Add(-time.Second), Reason: "stuck"}
	if err := o.report(ctx, end, 0, open); err != nil {
		t.Fatal(err)
	}
	if err := o.flush(ctx); err != nil {
		t.Fatal(err)
	}
	recs, err := hist.Read(ctx, "gap.", now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 ||
		recs[0].Kind != history.KindEnded || recs[0].Token != 2 || recs[0].EndedBy != "unknown" || recs[0].Renewals != 1 ||
		recs[1].Kind != history.KindEnded || recs[1].Token != 5 || recs[1].Holder != "h2" || recs[1].EndedBy != history.EndRevoked {
		t.Fatalf("history %+v, want the end of token 2 (unknown, 1 renewal), then token 5's revocation by h2", recs)
	}
	if len(open) != 0 {
		t.Errorf("open tenures left: %v", open)
	}
}

// A grant that carries the end of a tenure the observer's watch missed
// whole (begun and ended while it lagged, or between two observers), after
// one it has open or the history shows open, records that one's end, cause
// unknown, at the missed one's begin, and the missed one's end as its
// tombstone has it. Only the open one's end was recorded (or folded), at
// the grant: the history gave the lease to its holder while another held
// it, and had no row of the other (found killing the observer's node, also
// the stream leader, under load).
func TestObserverRecordsATenureItsWatchMissedWhole(t *testing.T) {
	for _, c := range []struct {
		name     string
		takeover bool // the tenure before is not open in this observer, but in the history
	}{
		{"lagged", false},
		{"takeover", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, _ := testObserver(t)
			ctx, st, hist := t.Context(), o.s.store, o.hist
			acquire := func(holder string) *kvlease.Lease { return acquireFor(t, st, "whole.a", holder) }
			a := acquire("h1")
			open := map[string]*openTenure{"whole.a": {token: a.Token(), renewals: 1}}
			var after uint64
			if c.takeover {
				ar := a.Record()
				begin := kvlease.Event{Type: kvlease.EventGranted, Name: "whole.a", Revision: uint64(ar.Token), Token: ar.Token,
					Holder: "h1", Time: ar.GrantedAt, GrantedAt: ar.GrantedAt, Record: &ar}
				if err := o.report(ctx, begin, 0, map[string]*openTenure{}); err != nil {
					t.Fatal(err)
				}
				if err := o.flush(ctx); err != nil {
					t.Fatal(err)
				}
				open = map[string]*openTenure{}
			}
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			b := acquire("h2")
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			cl := acquire("h3")
			if c.takeover {
				after = uint64(cl.Token()) // the observer took over after c's grant
			}
			grant := carriedGrant(t, st, "whole.a", uint64(a.Token()), cl.Token(), b.Token())
			if err := o.report(ctx, grant, after, open); err != nil {
				t.Fatal(err)
			}
			if err := o.flush(ctx); err != nil {
				t.Fatal(err)
			}
			recs, err := hist.Read(ctx, "whole.", time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if c.takeover {
				if len(recs) == 0 || recs[0].Kind != history.KindGranted || recs[0].Token != uint64(a.Token()) {
					t.Fatalf("history %+v, want token %d's grant first", recs, a.Token())
				}
				recs = recs[1:]
			} else if len(recs) == 3 && recs[2].Kind == history.KindGranted && recs[2].Token == uint64(cl.Token()) {
				recs = recs[:2]
			}
			renewals := 1
			if c.takeover {
				renewals = 0
			}
			bGranted := b.Record().GrantedAt
			if len(recs) != 2 ||
				recs[0].Kind != history.KindEnded || recs[0].Token != uint64(a.Token()) || recs[0].EndedBy != history.EndUnknown ||
				recs[0].Renewals != renewals || !recs[0].Time.Equal(bGranted) ||
				recs[1].Kind != history.KindEnded || recs[1].Token != uint64(b.Token()) || recs[1].Holder != "h2" ||
				recs[1].EndedBy != history.EndReleased {
				t.Fatalf("history %+v\nwant the end of token %d (unknown, %d renewals) at %v, then token %d's release by h2",
					recs, a.Token(), renewals, bGranted, b.Token())
			}
		})
	}
}

// A tenure begun and ended while no observer watched, after the
// history's last record (an observer paused or killed, and the next one
// taking over), is recorded from the tombstone the next grant carries,
// whether the history's last record of the lease is an earlier tenure's
// grant or its end. The observer looked the history up only for a carried
// end at or below its start, and the missed tenure was in no row, the
// earlier one's holder shown holding over it (found by an outside client
// pausing the observer's node under load: a release between two
// observers, token 404, had no row).
func TestObserverRecordsATenureMissedWholeAfterTheHistorysLast(t *testing.T) {
	for _, c := range []struct {
		name  string
		ended bool // the history has the earlier tenure's end too
	}{
		{"earlier open", false},
		{"earlier ended", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, _ := testObserver(t)
			ctx, st, hist := t.Context(), o.s.store, o.hist
			acquire := func(holder string) *kvlease.Lease { return acquireFor(t, st, "gap.a", holder) }
			a := acquire("h1")
			ar := a.Record()
			if err := a.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// What the observer before recorded: a's grant, and its end.
			recs := []history.Record{{Kind: history.KindGranted, Name: "gap.a", Token: uint64(ar.Token), Holder: "h1",
				Revision: uint64(ar.Token), Time: ar.GrantedAt, GrantedAt: ar.GrantedAt}}
			if c.ended {
				recs = append(recs, history.Record{Kind: history.KindEnded, Name: "gap.a", Token: uint64(ar.Token), Holder: "h1",
					Revision: uint64(ar.Token) + 1, Time: time.Now(), GrantedAt: ar.GrantedAt, EndedBy: history.EndReleased})
			}
			if _, err := hist.AppendAll(ctx, recs); err != nil {
				t.Fatal(err)
			}
			after := recs[len(recs)-1].Revision
			b := acquire("h2")
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
			cl := acquire("h3")
			grant := carriedGrant(t, st, "gap.a", after, cl.Token(), b.Token())
			if err := o.report(ctx, grant, after, map[string]*openTenure{}); err != nil {
				t.Fatal(err)
			}
			if err := o.flush(ctx); err != nil {
				t.Fatal(err)
			}
			got, err := hist.Read(ctx, "gap.", time.Now().Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			ts := history.Fold(got)
			wantA := history.EndReleased
			if !c.ended {
				wantA = history.EndUnknown
			}
			if len(ts) != 3 ||
				ts[0].Token != uint64(a.Token()) || ts[0].EndedBy != wantA ||
				ts[1].Token != uint64(b.Token()) || ts[1].Holder != "h2" || ts[1].EndedBy != history.EndReleased || ts[1].From.IsZero() ||
				ts[0].To.After(ts[1].From) ||
				ts[2].Token != uint64(cl.Token()) || ts[2].Holder != "h3" || !ts[2].Live() {
				t.Fatalf("tenures %+v\nwant token %d (h1, %s), token %d (h2, released), token %d (h3, live)",
					ts, a.Token(), wantA, b.Token(), cl.Token())
			}
		})
	}
}

// The records of a backlog go to the history as one atomic batch (one
// synced write), in order, and each change is published once it is in;
// one by one if the store does not batch its own writes.
func TestObserverFlushesBacklogAsOneBatch(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) { testObserverFlushesBacklog(t, batching) })
	}
}

func testObserverFlushesBacklog(t *testing.T, batching bool) {
	var opts []kvlease.Option
	if !batching {
		opts = append(opts, kvlease.WithoutBatching())
	}
	o, nc := testObserver(t, opts...)
	ctx, st := t.Context(), o.s.store
	sub, err := nc.SubscribeSync(api.SubjectEvents + "burst.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	open := map[string]*openTenure{}
	now := time.Now()
	const n = 20
	for i := range n {
		ev := kvlease.Event{Type: kvlease.EventGranted, Name: fmt.Sprintf("burst.%d", i), Revision: uint64(i + 1),
			Token: kvlease.Token(i + 1), Holder: "h", Time: now, GrantedAt: now}
		if err := o.report(ctx, ev, 0, open); err != nil {
			t.Fatal(err)
		}
	}
	if m, err := sub.NextMsg(50 * time.Millisecond); err == nil {
		t.Fatalf("change %s published before its record was written", m.Subject)
	}
	if err := o.flush(ctx); err != nil {
		t.Fatal(err)
	}
	stream, err := st.JetStream().Stream(ctx, history.StreamName(st.Bucket()))
	if err != nil {
		t.Fatal(err)
	}
	batches := map[string]int{}
	for seq := uint64(1); seq <= n; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var r history.Record
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Token != seq {
			t.Fatalf("record %d: %+v, %v; want token %d", seq, r, err, seq)
		}
		batches[m.Header.Get(atomicbatch.HeaderID)]++
	}
	switch {
	case batching && (len(batches) != 1 || batches[""] != 0):
		t.Errorf("records by batch: %v, want all %d in one", batches, n)
	case !batching && batches[""] != n:
		t.Errorf("records by batch: %v, want all %d alone", batches, n)
	}
	for i := range n {
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("change %d not published: %v", i, err)
		}
		if want := fmt.Sprintf("%sburst.%d", api.SubjectEvents, i); m.Subject != want {
			t.Errorf("change %d published on %s, want %s", i, m.Subject, want)
		}
	}
}

// testObserver returns an observer of a fresh server's bucket, not
// campaigning (tests call report and flush), and the service's connection.
// acquireFor grants name to holder for 10 s.
func acquireFor(t *testing.T, st *kvlease.Store, name, holder string) *kvlease.Lease {
	t.Helper()
	l, err := kvlease.Acquire(t.Context(), st, name, holder, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// carriedGrant watches name from revision after for the grant of token,
// which must carry the end of token ended (the tenure before it, which
// the watch may not have reported).
func carriedGrant(t *testing.T, st *kvlease.Store, name string, after uint64, token, ended kvlease.Token) kvlease.Event {
	t.Helper()
	w, err := st.Watch(t.Context(), name, kvlease.ExactName(), kvlease.ChangesAfter(after))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Type == kvlease.EventGranted && ev.Token == token {
			if end, ok := ev.Replaced(); !ok || end.Token != ended {
				t.Fatalf("the grant of token %d carries %+v, %v; want the end of token %d", token, end, ok, ended)
			}
			return ev
		}
	}
	t.Fatalf("the watch of %s ended before the grant of token %d", name, token)
	return kvlease.Event{}
}

func testObserver(t *testing.T, opts ...kvlease.Option) (*observer, *nats.Conn) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), opts...)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	s, err := New(st, nc, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	hist, err := history.Open(t.Context(), st.JetStream(), st.Bucket(), s.historyOptions())
	if err != nil {
		t.Fatal(err)
	}
	return &observer{s: s, hist: hist, candidate: "test", flaps: telemetry.NewFlapDetector(time.Minute, 3)}, nc
}

// An end at or below the revision the history was complete to when the
// observer began comes from its watch only for a tenure it replayed live
// from a node behind the stream (kvlease.Watch reports that end as a
// change). It is recorded unless the history has it: a predecessor's
// record is not duplicated, and one whose watch lagged past the end
// (found in review) is made good.
func TestObserverRecordsAnEndFromBeforeItBeganOnce(t *testing.T) {
	o, _ := testObserver(t)
	ctx, hist := t.Context(), o.hist
	now := time.Now()
	end := func(name string) kvlease.Event {
		return kvlease.Event{Type: kvlease.EventReleased, Name: name, Revision: 6, Time: now, Holder: "h1", Token: 3,
			GrantedAt: now.Add(-time.Second)}
	}
	// "stale.recorded": the predecessor recorded the end.
	if _, err := hist.Append(ctx, history.Record{Kind: history.KindEnded, Name: "stale.recorded", Token: 3, Holder: "h1",
		Revision: 6, Time: now, EndedBy: history.EndReleased}); err != nil {
		t.Fatal(err)
	}
	open := map[string]*openTenure{"stale.recorded": {token: 3}, "stale.missed": {token: 3}}
	for _, name := range []string{"stale.recorded", "stale.missed"} {
		if err := o.report(ctx, end(name), 9, open); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.flush(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int{"stale.recorded": 1, "stale.missed": 1} {
		recs, err := hist.Read(ctx, name, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != want || recs[0].Kind != history.KindEnded {
			t.Errorf("history of %s: %+v; want its one end", name, recs)
		}
	}
	if len(open) != 0 {
		t.Errorf("open tenures left: %v", open)
	}
}

// The lapse of a tenure opened without its begin (unchecked: replayed at
// a takeover, or by rescan) is recorded unless the history has its end: a
// tenure a server brought back whose own lapse (a marker, naming no
// token) came before EndResurrected's end was recorded twice (found in
// review). The history's records are published without a message ID, as
// one older than the stream's two-minute duplicate window is to a second
// end.
func TestObserverRecordsTheLapseOfAnUncheckedTenureOnce(t *testing.T) {
	o, nc := testObserver(t)
	ctx, hist := t.Context(), o.hist
	js := kvleasetest.JetStream(t, nc)
	now := time.Now()
	for _, r := range []history.Record{
		{Kind: history.KindEnded, Name: "back.ended", Token: 3, Holder: "h1", Revision: 4, Time: now.Add(-time.Minute), EndedBy: history.EndReleased},
		{Kind: history.KindGranted, Name: "back.live", Token: 5, Holder: "h1", Revision: 5, Time: now.Add(-time.Minute)},
	} {
		b, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, history.Subject(o.s.store.Bucket(), r.Name), b); err != nil {
			t.Fatal(err)
		}
	}
	open := map[string]*openTenure{"back.ended": {token: 3, unchecked: true}, "back.live": {token: 5, unchecked: true}}
	for _, name := range []string{"back.ended", "back.live"} {
		lapse := kvlease.Event{Type: kvlease.EventExpired, Name: name, Revision: 20, Time: now} // a marker: no token
		if err := o.report(ctx, lapse, 9, open); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.flush(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{"back.ended": {history.KindEnded}, "back.live": {history.KindGranted, history.KindEnded}} {
		recs, err := hist.Read(ctx, name, now.Add(-time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, r := range recs {
			kinds = append(kinds, r.Kind)
		}
		if !slices.Equal(kinds, want) {
			t.Errorf("history of %s: %+v; want %v", name, recs, want)
		}
	}
}

// The history shows a tenure ended only for that tenure: its own end (same
// token and holder, granted within the slack of two clocks), or a later
// tenure recorded after its grant; a token alone is no proof (a bucket
// made anew reuses them).
func TestEndedBy(t *testing.T) {
	granted := time.Date(2026, 12, 5, 20, 0, 0, 0, time.UTC)
	rec := kvlease.Record{Name: "a", Holder: "h1", Token: 3, GrantedAt: granted}
	end := func(mod func(*history.Record)) history.Record {
		r := history.Record{Kind: history.KindEnded, Name: "a", Token: 3, Holder: "h1", GrantedAt: granted.Add(2 * time.Millisecond),
			Time: granted.Add(time.Second)}
		mod(&r)
		return r
	}
	for _, c := range []struct {
		name string
		last history.Record
		want bool
	}{
		{"its end, the granting node's clock", end(func(*history.Record) {}), true},
		{"its begin only", end(func(r *history.Record) { r.Kind = history.KindGranted }), false},
		{"another holder's", end(func(r *history.Record) { r.Holder = "h2" }), false},
		{"granted a minute apart", end(func(r *history.Record) { r.GrantedAt = granted.Add(-time.Minute) }), false},
		{"no grant time", end(func(r *history.Record) { r.GrantedAt = time.Time{} }), false},
		{"a later tenure after it", end(func(r *history.Record) { r.Token, r.Kind, r.Time = 9, history.KindGranted, granted.Add(time.Minute) }), true},
		{"a later token within the clocks' slack", end(func(r *history.Record) { r.Token, r.Kind = 9, history.KindGranted }), false},
		{"a later token before it", end(func(r *history.Record) { r.Token, r.Time = 9, granted.Add(-time.Hour) }), false},
		{"an earlier token", end(func(r *history.Record) { r.Token = 2 }), false},
	} {
		if got := endedBy(rec, c.last); got != c.want {
			t.Errorf("%s: endedBy = %v, want %v", c.name, got, c.want)
		}
	}
}

// The ends the observer remembers give their room back once forgotten: a
// Go map keeps the room it grew to, and after a churn of distinct names
// stopped, an idle serve kept 16 MB of them for good (found measuring
// serve's heap).
func TestObserverForgetsEndsAndTheirRoom(t *testing.T) {
	o := &observer{}
	base := liveHeap()
	for i := range 125_000 {
		o.sawEnd(fmt.Sprint("churn.", i), kvlease.Token(i+1))
	}
	grown := liveHeap()
	if grown < base+8<<20 {
		t.Fatalf("125,000 ends took %d bytes: too few to tell", int64(grown)-int64(base))
	}
	o.forgetEnds(time.Now().Add(kvlease.DefaultMarkerTTL + 2*time.Minute))
	if after := liveHeap(); after > base+(grown-base)/4 {
		t.Errorf("live heap %d MB with the ends forgotten, %d MB before them, %d MB with them: their room was kept",
			after>>20, base>>20, grown>>20)
	}
	if len(o.ended) != 0 {
		t.Fatalf("%d ends kept, want none", len(o.ended))
	}
}

// liveHeap is the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
