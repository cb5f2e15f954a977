package history_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/atomicbatch"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestFold(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	recs := []history.Record{
		{Kind: history.KindGranted, Name: "b", Token: 5, Holder: "h1", Revision: 5, Time: at(0), GrantedAt: at(0), DurationMS: 3000},
		{Kind: history.KindGranted, Name: "a", Token: 6, Holder: "h2", Revision: 6, Time: at(1), GrantedAt: at(1), Flapping: true},
		{Kind: history.KindEnded, Name: "b", Token: 5, Holder: "h1", Revision: 9, Time: at(4), EndedBy: history.EndReleased, Renewals: 2},
		// appended twice (two observers, beyond the duplicate window): folded once
		{Kind: history.KindEnded, Name: "b", Token: 5, Holder: "h1", Revision: 9, Time: at(4), EndedBy: history.EndReleased, Renewals: 1},
		// ended again, later: the server brought the tenure back after an
		// unclean restart and leased ended it anew; the first end stands
		{Kind: history.KindEnded, Name: "b", Token: 5, Holder: "h1", Revision: 12, Time: at(40), EndedBy: history.EndExpired,
			Reason: "the NATS server kept the lease past its TTL"},
		// the end of a tenure whose begin is older than what was read
		{Kind: history.KindEnded, Name: "a", Token: 2, Holder: "h0", Revision: 7, Time: at(2), GrantedAt: t0.Add(-time.Minute), EndedBy: history.EndExpired},
		// an expiry no observer saw begin
		{Kind: history.KindEnded, Name: "a", Revision: 8, Time: at(3), EndedBy: history.EndExpired},
		// a tenure whose end no observer recorded (lost as observers took
		// over), then the next tenure, live: the first ended by its begin
		{Kind: history.KindGranted, Name: "c", Token: 20, Holder: "h1", Revision: 20, Time: at(10), GrantedAt: at(10)},
		{Kind: history.KindGranted, Name: "c", Token: 31, Holder: "h2", Revision: 31, Time: at(19), GrantedAt: at(19)},
	}
	got := history.Fold(recs)
	want := []history.Tenure{
		{Name: "a", Token: 2, Holder: "h0", From: t0.Add(-time.Minute), To: at(2), EndedBy: history.EndExpired},
		{Name: "a", Token: 6, Holder: "h2", From: at(1), Flapping: true},
		{Name: "a", To: at(3), EndedBy: history.EndExpired},
		{Name: "b", Token: 5, Holder: "h1", From: at(0), To: at(4), DurationMS: 3000, Renewals: 2, EndedBy: history.EndReleased},
		{Name: "c", Token: 20, Holder: "h1", From: at(10), To: at(19), EndedBy: history.EndUnknown, EndInferred: true},
		{Name: "c", Token: 31, Holder: "h2", From: at(19)},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d tenures %+v, want %d", len(got), got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("tenure %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !got[1].Live() || got[3].Live() || got[3].Held(time.Now()) != 4*time.Second {
		t.Errorf("live/held wrong: %+v", got)
	}
}

// A revocation that held the lease (no grant allowed) is folded into its
// tenure's HeldUntil: the hold's end, or its free, or the next tenure's
// begin, whichever came first; a free of a tenure that ended before the
// records read is no tenure of its own.
func TestFoldHolds(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	revoked := func(name string, token uint64, s int, holdS int64) history.Record {
		return history.Record{Kind: history.KindEnded, Name: name, Token: token, Holder: "h1", Revision: token + 1, Time: at(s),
			EndedBy: history.EndRevoked, Reason: "stuck", HoldMS: holdS * 1000}
	}
	granted := func(name string, token uint64, s int) history.Record {
		return history.Record{Kind: history.KindGranted, Name: name, Token: token, Holder: "h1", Revision: token, Time: at(s), GrantedAt: at(s)}
	}
	freed := func(name string, token uint64, s int) history.Record {
		return history.Record{Kind: history.KindFreed, Name: name, Token: token, Holder: "h1", Revision: token + 2, Time: at(s)}
	}
	recs := []history.Record{
		granted("ran-out", 1, 0), revoked("ran-out", 1, 2, 31), // held until its hold ran out
		granted("freed", 3, 0), revoked("freed", 3, 2, 31), freed("freed", 3, 5), // its holder released it
		granted("now", 6, 0), revoked("now", 6, 2, 0), // free_now: no hold
		granted("next", 8, 0), revoked("next", 8, 2, 31), granted("next", 20, 9), // freed with no record of it
		freed("before", 2, 7), // of a tenure that ended before the records read
	}
	got := history.Fold(recs)
	want := map[string]time.Time{"ran-out": at(33), "freed": at(5), "now": {}, "next": at(9)}
	for _, tn := range got {
		if tn.Name == "before" {
			t.Errorf("a free of a tenure not read is a tenure of its own: %+v", tn)
			continue
		}
		if tn.Token == 20 {
			continue
		}
		if w := want[tn.Name]; !tn.HeldUntil.Equal(w) || tn.EndedBy != history.EndRevoked || !tn.To.Equal(at(2)) {
			t.Errorf("%s: held until %v, ended %s at %v; want held until %v, revoked at %v", tn.Name, tn.HeldUntil, tn.EndedBy, tn.To, w, at(2))
		}
	}
	if len(got) != 5 {
		t.Errorf("got %d tenures, want 5: %+v", len(got), got)
	}
	for _, r := range recs {
		if r.Ends() != (r.Kind != history.KindGranted) {
			t.Errorf("%s record: Ends() = %v", r.Kind, r.Ends())
		}
	}
}

// Opened without a retention, the stream keeps its own, and a new one
// the default: a grantor restarted without --history-retention cut the
// week its cluster kept to a day (found by an outside client).
func TestOpenWithoutRetentionKeepsTheStreams(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	maxAge := func(bucket string) time.Duration {
		t.Helper()
		st, err := js.Stream(ctx, history.StreamName(bucket))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxAge
	}
	if _, err := history.Open(ctx, js, "fresh", history.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	if got := maxAge("fresh"); got != history.DefaultRetention {
		t.Errorf("a new stream opened without a retention keeps %v, want %v", got, history.DefaultRetention)
	}
	week := 7 * 24 * time.Hour
	if _, err := history.Open(ctx, js, "kept", history.Options{Create: true, Retention: week}); err != nil {
		t.Fatal(err)
	}
	h, err := history.Open(ctx, js, "kept", history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := maxAge("kept"); got != week || h.Shortened() != 0 {
		t.Errorf("a stream of %v opened again without a retention keeps %v (shortened %v), want %v", week, got, h.Shortened(), week)
	}
	// A stream an operator set to keep everything (max age 0, as `nats
	// stream edit --max-age 0` does) was cut to the default day, without
	// a word (found in review).
	st, err := js.Stream(ctx, history.StreamName("kept"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = 0
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := history.Open(ctx, js, "kept", history.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	if got := maxAge("kept"); got != 0 {
		t.Errorf("a stream that keeps everything, opened again without a retention, keeps %v, want everything (0)", got)
	}
}

// Open changes only what it sets: a size bound an operator gave the
// stream (the one bound of the history by size: JetStream's storage full
// of it refuses every grant) stays when a grantor opens it with another
// retention. The update sent Open's whole config, and dropped it without
// a word (found by an outside client, s21d).
func TestOpenKeepsWhatItDoesNotSet(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	if _, err := history.Open(ctx, js, "leases", history.Options{Create: true}); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, history.StreamName("leases"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config // as `nats stream edit --max-bytes 1MiB --max-msgs 5000` sets it
	cfg.MaxBytes, cfg.MaxMsgs = 1<<20, 5000
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := history.Open(ctx, js, "leases", history.Options{Create: true, Retention: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	st, err = js.Stream(ctx, history.StreamName("leases"))
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config; got.MaxAge != 2*time.Hour || got.MaxBytes != 1<<20 || got.MaxMsgs != 5000 {
		t.Errorf("opened with retention 2h: max age %v, max bytes %d, max msgs %d; want 2h, %d, 5000 (the operator's)",
			got.MaxAge, got.MaxBytes, got.MaxMsgs, 1<<20)
	}
}

// The history's retention was by age only, and it shares the NATS
// server's storage with the bucket: a churn of leases filled the storage
// with history, and every grant was refused (found by an outside client:
// a 6 MB store, 4 MB of it history). MaxBytes bounds it, dropping the
// oldest records; 0 keeps the stream's bound, -1 removes it.
func TestOpenBoundsTheHistorysSize(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	for _, bad := range []int64{-2, 1000, history.MinMaxBytes - 1} {
		if _, err := history.Open(ctx, js, "leases", history.Options{Create: true, MaxBytes: bad}); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("max bytes %d: %v; want ErrInvalidOption", bad, err)
		}
	}
	maxBytes := func() int64 {
		t.Helper()
		st, err := js.Stream(ctx, history.StreamName("leases"))
		if err != nil {
			t.Fatal(err)
		}
		return st.CachedInfo().Config.MaxBytes
	}
	const bound = history.MinMaxBytes
	h, err := history.Open(ctx, js, "leases", history.Options{Create: true, MaxBytes: bound})
	if err != nil {
		t.Fatal(err)
	}
	if got := maxBytes(); got != bound {
		t.Fatalf("created with max bytes %d: %d", bound, got)
	}
	// More than the bound: the oldest records go.
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	var recs []history.Record
	for i := range 6000 {
		recs = append(recs, history.Record{Kind: history.KindGranted, Name: fmt.Sprintf("churn.%d", i), Token: uint64(i + 1),
			Holder: "holder-with-a-name-of-some-length", Revision: uint64(i + 1), Time: at, GrantedAt: at})
		if len(recs) == 500 {
			if _, err := h.AppendAll(ctx, recs); err != nil {
				t.Fatal(err)
			}
			recs = recs[:0]
		}
	}
	st, err := js.Stream(ctx, history.StreamName("leases"))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := st.Info(ctx); err != nil || info.State.Bytes > bound || info.State.FirstSeq == 1 {
		t.Fatalf("after 6,000 records: %+v, %v; want at most %d bytes, the first records dropped", info.State, err, bound)
	}
	if _, err := history.Open(ctx, js, "leases", history.Options{Create: true}); err != nil || maxBytes() != bound {
		t.Fatalf("opened without max bytes: %v, max bytes %d; want the stream's %d kept", err, maxBytes(), bound)
	}
	if _, err := history.Open(ctx, js, "leases", history.Options{Create: true, MaxBytes: -1}); err != nil || maxBytes() != -1 {
		t.Fatalf("opened with max bytes -1: %v, max bytes %d; want none (-1)", err, maxBytes())
	}
}

// Records are kept once per change even when appended twice (a new
// observer re-reporting what a paused one had already recorded); Last and
// LastFor read them back; Follow delivers the stored ones, then the new.
func TestStream(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	if _, err := history.Open(ctx, js, "leases", history.Options{}); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("open without create: %v, want ErrNotFound", err)
	}
	if _, err := history.Open(ctx, js, "leases", history.Options{Retention: -time.Second, Create: true}); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("negative retention: %v", err)
	}
	h, err := history.Open(ctx, js, "leases", history.Options{Create: true, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Opened again with a shorter retention, it says what it was (records
	// older than the new one are gone: a grantor logs it).
	for _, c := range []struct{ retention, shortened time.Duration }{{30 * time.Minute, time.Hour}, {time.Hour, 0}} {
		s, err := history.Open(ctx, js, "leases", history.Options{Create: true, Retention: c.retention})
		if err != nil {
			t.Fatal(err)
		}
		if s.Shortened() != c.shortened || h.Shortened() != 0 {
			t.Fatalf("open with retention %v: shortened %v; want %v", c.retention, s.Shortened(), c.shortened)
		}
	}
	if _, ok, err := h.Last(ctx); ok || err != nil {
		t.Fatalf("last of an empty history: %v, %v", ok, err)
	}
	begin := history.Record{Kind: history.KindGranted, Name: "job.a", Token: 3, Holder: "h", Revision: 3, Time: time.Now()}
	end := history.Record{Kind: history.KindEnded, Name: "job.a", Token: 3, Holder: "h", Revision: 4, Time: time.Now(), EndedBy: history.EndReleased}
	for i, r := range []history.Record{begin, begin, end, end} {
		fresh, err := h.Append(ctx, r)
		if err != nil || fresh != (i%2 == 0) {
			t.Fatalf("append %d: fresh %v, %v", i, fresh, err)
		}
	}
	last, ok, err := h.Last(ctx)
	if err != nil || !ok || last.Revision != 4 || last.Kind != history.KindEnded {
		t.Fatalf("last: %+v %v %v", last, ok, err)
	}
	recs, err := h.Read(ctx, "job.", time.Now().Add(-time.Minute))
	if err != nil || len(recs) != 2 {
		t.Fatalf("read: %+v, %v; want the begin and the end once each", recs, err)
	}
	if ts := history.Fold(recs); len(ts) != 1 || ts[0].EndedBy != history.EndReleased {
		t.Fatalf("fold: %+v", ts)
	}
	if other, err := h.Read(ctx, "jobs", time.Now().Add(-time.Minute)); err != nil || len(other) != 0 {
		t.Fatalf("read of another prefix: %+v, %v", other, err)
	}
	if later, err := h.Read(ctx, "", time.Now().Add(time.Minute)); err != nil || len(later) != 0 {
		t.Fatalf("read of nothing since: %+v, %v", later, err)
	}

	// Follow: the stored records, the caught-up mark, then a new one.
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got := make(chan history.Record, 8)
	caught := make(chan struct{})
	go func() {
		_ = h.Follow(fctx, "", time.Now().Add(-time.Minute), func(r history.Record, caughtUp bool) bool {
			if caughtUp {
				close(caught)
				return true
			}
			got <- r
			return r.Name != "job.b"
		})
	}()
	<-caught
	if n := len(got); n != 2 {
		t.Fatalf("%d records before catching up, want 2", n)
	}
	if _, err := h.Append(ctx, history.Record{Kind: history.KindGranted, Name: "job.b", Token: 7, Revision: 7, Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	<-got
	<-got
	select {
	case r := <-got:
		if r.Name != "job.b" {
			t.Fatalf("followed %+v", r)
		}
	case <-fctx.Done():
		t.Fatal("the new record was not delivered")
	}
	if r, ok, err := h.LastFor(ctx, "job.a"); err != nil || !ok || r.Kind != history.KindEnded {
		t.Fatalf("last for job.a: %+v %v %v", r, ok, err)
	}
}

// AppendAll writes a backlog as one atomic batch, in order; a backlog that
// repeats records appended before (an observer that took over from one
// that was only paused) is refused as a batch and appended one by one, so
// that each record is kept once and the fresh ones are told apart.
func TestAppendAll(t *testing.T) {
	ctx := t.Context()
	h, js, _ := newStream(t)
	t0 := time.Now()
	var recs []history.Record
	for i := range 12 {
		recs = append(recs, history.Record{Kind: history.KindGranted, Name: fmt.Sprintf("all.%d", i%3), Token: uint64(i + 1),
			Holder: "h", Revision: uint64(i + 1), Time: t0, GrantedAt: t0})
	}
	stream, err := js.Stream(ctx, history.StreamName("leases"))
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := h.AppendAll(ctx, recs[:10])
	if err != nil || len(fresh) != 10 || slices.Contains(fresh, false) {
		t.Fatalf("first append: %v, %v; want 10 fresh", fresh, err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 10 {
		t.Fatalf("%d records stored, want 10", info.State.Msgs)
	}
	// Appended as one batch: the server keeps the batch headers.
	m, err := stream.GetMsg(ctx, info.State.LastSeq)
	if err != nil || m.Header.Get(atomicbatch.HeaderCommit) != "1" {
		t.Errorf("last record's headers %v (%v): not the commit of an atomic batch", m.Header, err)
	}

	fresh, err = h.AppendAll(ctx, recs)
	if err != nil {
		t.Fatal(err)
	}
	want := append(slices.Repeat([]bool{false}, 10), true, true)
	if !slices.Equal(fresh, want) {
		t.Errorf("second append: fresh %v, want %v", fresh, want)
	}
	got, err := h.Read(ctx, "all.", t0.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 12 {
		t.Fatalf("%d records, want 12", len(got))
	}
	for i, r := range got {
		if r.Token != uint64(i+1) {
			t.Errorf("record %d: token %d, want %d (in order)", i, r.Token, i+1)
		}
	}
}

// EndLive ends the live tenures at or below its bound, once, and leaves
// alone those above it (a bucket made anew above its history, whose
// tenures another node may record meanwhile) and those that ended.
func TestEndLive(t *testing.T) {
	ctx := t.Context()
	h, _, _ := newStream(t)
	t0 := time.Now().Add(-time.Minute)
	granted := func(name string, tok uint64) history.Record {
		return history.Record{Kind: history.KindGranted, Name: name, Token: tok, Holder: "h", Revision: tok, Time: t0, GrantedAt: t0}
	}
	released := granted("end.released", 2)
	released.Kind, released.EndedBy, released.Revision = history.KindEnded, history.EndReleased, 3
	recs := []history.Record{granted("end.live", 1), granted("end.released", 2), released, granted("end.new", 10)}
	if _, err := h.AppendAll(ctx, recs); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	for i, want := range []int{1, 0} { // the second finds it ended
		if n, err := h.EndLive(ctx, 9, 9, at); err != nil || n != want {
			t.Fatalf("EndLive #%d: %d, %v; want %d ended", i+1, n, err, want)
		}
	}
	got, err := h.Read(ctx, "end.", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]string{}
	for _, ten := range history.Fold(got) {
		ends[ten.Name] = ten.EndedBy
	}
	if want := map[string]string{"end.live": history.EndUnknown, "end.released": history.EndReleased, "end.new": ""}; !maps.Equal(ends, want) {
		t.Errorf("tenures ended by %v, want %v", ends, want)
	}
	if len(got) != len(recs)+1 {
		t.Errorf("%d records, want %d: one end added", len(got), len(recs)+1)
	}
}

// Held gives the begin of each lease whose last record is one, in order of
// revision, and nothing for an empty history.
func TestHeld(t *testing.T) {
	ctx := t.Context()
	h, _, _ := newStream(t)
	if got, err := h.Held(ctx, 5*time.Second); err != nil || len(got) != 0 {
		t.Fatalf("an empty history: %+v, %v; want none", got, err)
	}
	t0 := time.Now().Add(-time.Minute)
	rec := func(kind, name string, tok, rev uint64) history.Record {
		return history.Record{Kind: kind, Name: name, Token: tok, Holder: "h", Revision: rev, Time: t0, GrantedAt: t0}
	}
	freed := rec(history.KindFreed, "d", 7, 9)
	recs := []history.Record{rec(history.KindGranted, "a.x", 1, 1), rec(history.KindGranted, "b", 2, 2),
		rec(history.KindEnded, "a.x", 1, 3), rec(history.KindGranted, "a.x", 4, 4), rec(history.KindGranted, "c", 5, 5),
		rec(history.KindEnded, "c", 5, 6), rec(history.KindGranted, "d", 7, 7), rec(history.KindEnded, "d", 7, 8), freed}
	if _, err := h.AppendAll(ctx, recs); err != nil {
		t.Fatal(err)
	}
	got, err := h.Held(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, r := range got {
		held = append(held, fmt.Sprintf("%s %s %d", r.Name, r.Kind, r.Token))
	}
	if want := []string{"b granted 2", "a.x granted 4"}; !slices.Equal(held, want) {
		t.Errorf("held %q, want %q", held, want)
	}
}

// ReadIdle reads what Read does, and fails once nothing comes for its
// idle bound: here, the server gone.
func TestReadIdle(t *testing.T) {
	ctx := t.Context()
	h, _, srv := newStream(t)
	for _, r := range []history.Record{
		{Kind: history.KindGranted, Name: "job.a", Token: 3, Holder: "h", Revision: 3, Time: time.Now()},
		{Kind: history.KindGranted, Name: "other", Token: 4, Holder: "h", Revision: 4, Time: time.Now()},
		{Kind: history.KindEnded, Name: "job.a", Token: 3, Holder: "h", Revision: 5, Time: time.Now(), EndedBy: history.EndReleased},
	} {
		if _, err := h.Append(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(-time.Minute)
	recs, err := h.ReadIdle(ctx, "job", since, time.Second)
	if err != nil || len(recs) != 2 || recs[0].Name != "job.a" || recs[1].Kind != history.KindEnded {
		t.Fatalf("read idle: %+v, %v; want job.a's begin and end", recs, err)
	}
	srv.Shutdown()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if recs, err := h.ReadIdle(rctx, "", since, 500*time.Millisecond); !errors.Is(err, kvlease.ErrUnavailable) || recs != nil {
		t.Fatalf("read idle from a server gone: %+v, %v; want ErrUnavailable", recs, err)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("read idle from a server gone failed after %v, its bound 500ms", took)
	}
}

// A read sent while the stream has no leader (here two of three nodes are
// down; in the dev cluster, the leader's node had been killed) is asked
// again once a leader is back, not waited on for the caller's whole
// deadline: a timeline read used to fail after 30 s while the new leader
// had been serving for 25.
func TestReadWhileTheStreamHasNoLeader(t *testing.T) {
	servers := kvleasetest.NewCluster(t, 3)
	// The lease bucket first, as serve opens it: its Open waits for a
	// cluster still forming, whose placement of three replicas is refused
	// until every server has joined.
	kvleasetest.OpenStore(t, servers[0].ClientURL(), kvlease.WithReplicas(3))
	nc := kvleasetest.Connect(t, servers[0].ClientURL())
	js := kvleasetest.JetStream(t, nc)
	ctx := t.Context()
	h, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (*history.Stream, error) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		h, err := history.Open(actx, js, "leases", history.Options{Create: true, Replicas: 3})
		if err != nil {
			return nil, err
		}
		_, err = h.Append(actx, history.Record{Kind: history.KindGranted, Name: "a", Token: 1, Revision: 1, Time: time.Now()})
		return h, err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Sniff the requests the read sends to JetStream's API.
	asked := make(chan string, 100)
	kvleasetest.Subscribe(t, nc, "$JS.API.>", func(m *nats.Msg) {
		select {
		case asked <- m.Subject:
		default:
		}
	})
	servers[1].Shutdown()
	servers[2].Shutdown()
	type result struct {
		recs []history.Record
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		recs, err := h.Read(rctx, "", time.Now().Add(-time.Hour))
		done <- result{recs, err}
	}()
	select {
	case subj := <-asked:
		t.Logf("read asked %s with no leader", subj)
	case r := <-done:
		t.Fatalf("read without a quorum answered at once: %v, %v", r.recs, r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("the read sent no request")
	}
	if err := servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	select {
	case r := <-done:
		if r.err != nil || len(r.recs) != 1 || r.recs[0].Name != "a" {
			t.Fatalf("read: %+v, %v; want the one record", r.recs, r.err)
		}
		t.Logf("read answered %v after a quorum was back", time.Since(back).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("the read still waits 30 s after a quorum was back")
	}
}

// A --since the history cannot count in nanoseconds since 1970 (before
// 1678, after 2262) read as its opposite: 2300 as all of it, 1600 as
// nothing (found by an outside client). Before 1970 is 1970, the future
// now; durations past 290 years are refused with a message that says so.
func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	epoch := time.Unix(0, 0)
	for s, want := range map[string]time.Time{
		"1h":                   now.Add(-time.Hour),
		"0s":                   now,
		"2026-12-06T11:00:00Z": now.Add(-time.Hour),
		"1600-01-01T00:00:00Z": epoch,
		"2000000h":             epoch, // 228 years back
		"2300-01-01T00:00:00Z": now,
		"9999-12-31T23:59:59Z": now,
	} {
		if got, _, err := history.ParseSince(s, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for s, msg := range map[string]string{
		"-1h":       "negative",
		"soon":      "want a duration",
		"h":         "want a duration",
		"ms":        "want a duration",
		"10000000h": "too far back",
	} {
		if _, _, err := history.ParseSince(s, now); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseSince(%q): %v; want an error saying %q", s, err, msg)
		}
	}
}

// newStream opens (creates) bucket "leases"' history on a server of its own.
func newStream(t *testing.T) (*history.Stream, jetstream.JetStream, *kvleasetest.Server) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	h, err := history.Open(t.Context(), js, "leases", history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	return h, js, srv
}

// A NATS user that may create streams but not update them: Open updated
// the history stream whether or not it differed (CreateOrUpdateStream),
// the server answered the update with nothing, and Open waited until its
// ctx ended, so serve could not start as that user (kvlease.Open's own
// update had the same trouble). The stream is now created if missing and
// updated only if it differs; an update refused is kvlease.ErrPermission,
// at once.
func TestOpenWithoutStreamUpdatePermission(t *testing.T) {
	ns := kvleasetest.NewServer(t, kvleasetest.WithUsers(
		&server.User{Username: "creator", Password: "creator", Permissions: kvleasetest.PublishExcept("$JS.API.STREAM.UPDATE.>")},
	))
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, ns.ClientURL(), nats.UserInfo("creator", "creator"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})))
	for _, c := range []struct {
		name      string
		retention time.Duration
		refused   bool
	}{
		{name: "new", retention: time.Hour},
		{name: "as it is", retention: time.Hour},
		{name: "as it is, retention kept", retention: 0},
		{name: "retention changed", retention: 2 * time.Hour, refused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			h, err := history.Open(ctx, js, "leases", history.Options{Create: true, Retention: c.retention})
			switch {
			case ctx.Err() != nil:
				t.Fatalf("Open waited until its ctx ended: %v", err)
			case c.refused && (!errors.Is(err, kvlease.ErrPermission) || !strings.Contains(err.Error(), "$JS.API.STREAM.UPDATE.LEASED_HISTORY_leases")):
				t.Fatalf("Open: %v, want ErrPermission naming the update", err)
			case c.refused:
			case err != nil:
				t.Fatalf("Open: %v", err)
			default:
				if _, err := h.Append(ctx, history.Record{Kind: history.KindGranted, Name: "a", Token: 1, Holder: "h", Revision: 1,
					Time: time.Now(), GrantedAt: time.Now()}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A live tenure's renewals are counted when it ends: its JSON (history
// -o json, /api/tenures) leaves them out, as the text shows "-", and an
// ended tenure's say 0 when there were none. A live tenure said
// "renewals":0, read as none (found by an outside client).
func TestTenureJSONLeavesALiveTenuresRenewalsOut(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		t    history.Tenure
		want string
	}{
		{"live", history.Tenure{Name: "a", Holder: "h", Token: 3, From: at, Renewals: 4},
			`{"name":"a","holder":"h","token":3,"from":"2026-12-07T12:00:00Z"}`},
		{"ended, none", history.Tenure{Name: "a", Holder: "h", Token: 3, From: at, To: at.Add(time.Second), EndedBy: history.EndReleased},
			`{"name":"a","holder":"h","token":3,"from":"2026-12-07T12:00:00Z","to":"2026-12-07T12:00:01Z","renewals":0,"ended_by":"released"}`},
		{"ended, some", history.Tenure{Name: "a", Holder: "h", Token: 3, Renewals: 2, EndedBy: history.EndExpired},
			`{"name":"a","holder":"h","token":3,"renewals":2,"ended_by":"expired"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := json.Marshal(c.t)
			if err != nil || string(b) != c.want {
				t.Fatalf("json: %s, %v\nwant %s", b, err, c.want)
			}
			var back history.Tenure
			if err := json.Unmarshal(b, &back); err != nil || back.Renewals != c.t.Renewals && !c.t.Live() {
				t.Fatalf("read back: %+v, %v", back, err)
			}
		})
	}
}
