package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// waitGranted waits for w to report a new tenure of name and returns it.
func waitGranted(t *testing.T, w *kvlease.Watcher, name string) kvlease.Record {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			if ev.Name == name && ev.Type == kvlease.EventGranted && !ev.Replay {
				return *ev.Record
			}
		case <-timeout:
			t.Fatalf("no grant of %s seen", name)
		}
	}
}

// retryUnavailable calls f until it returns something other than
// ErrUnavailable (a client reconnecting after the proxy healed).
func retryUnavailable[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	return kvlease.RetryUnavailable(ctx, 200*time.Millisecond, nil, f)
}

// A grant stored by the server whose reply is lost is retried with the same
// request ID and secret: the retry gets that tenure, with its token, where
// without a request ID it would be refused "held" by its own tenure. The
// request ID alone (without the secret) wins nobody the tenure; a retry that
// asks for something else is refused; once the tenure has ended the request
// grants nothing again; and a retried release succeeds.
func TestGrantRetryAfterLostReply(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	st := kvleasetest.OpenStore(t, proxy.URL())
	direct := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	w, err := direct.Watch(ctx, "lost.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	rid, secret := kvlease.NewRequestID()
	req := kvlease.GrantRequest{Name: "lost.grant", Holder: "h1", Duration: 10 * time.Second,
		Attributes: map[string]string{"role": "primary"}, RequestID: rid, Secret: secret}
	proxy.DropReplies()
	actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = st.Grant(actx, req)
	cancel()
	if !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("grant with its reply dropped: %v, want ErrUnavailable", err)
	}
	stored := waitGranted(t, w, req.Name) // the server carried it out
	proxy.Heal()

	// Without a request ID, the caller's own tenure refuses it.
	plain := req
	plain.RequestID = ""
	var held *kvlease.HeldError
	if _, err := retryUnavailable(t, func() (kvlease.Record, error) { return st.Grant(ctx, plain) }); !errors.As(err, &held) || held.Token != stored.Token {
		t.Fatalf("grant without the request id: %v, want HeldError by token %d", err, stored.Token)
	}
	got, err := st.Grant(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Token != stored.Token || got.Revision != stored.Revision || !got.Recovered || got.Secret != secret || got.Holder != "h1" {
		t.Fatalf("retry: %+v, want the stored tenure %+v, recovered, with the secret", got, stored)
	}

	// The request ID without the secret is not proof: answered as without it.
	_, other := kvlease.NewRequestID()
	thief := req
	thief.Secret = other
	if _, err := direct.Grant(ctx, thief); !errors.As(err, &held) || held.Token != stored.Token {
		t.Fatalf("request id with another secret: %v, want HeldError", err)
	}
	for _, c := range []struct {
		field string
		edit  func(*kvlease.GrantRequest)
	}{
		{"holder", func(r *kvlease.GrantRequest) { r.Holder = "h2" }},
		{"duration", func(r *kvlease.GrantRequest) { r.Duration = 20 * time.Second }},
		{"attributes", func(r *kvlease.GrantRequest) { r.Attributes = nil }},
	} {
		r := req
		c.edit(&r)
		if _, err := direct.Grant(ctx, r); !errors.Is(err, kvlease.ErrRequestMismatch) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("retry with another %s: %v, want ErrRequestMismatch naming it", c.field, err)
		}
	}

	// The recovered tenure is the caller's: it renews and releases with it.
	ren, err := st.Renew(ctx, kvlease.RenewRequest{Name: req.Name, Holder: "h1", Token: got.Token, Revision: got.Revision, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	// A retry after a renewal still finds the tenure, at its current revision.
	again, err := st.Grant(ctx, req)
	if err != nil || again.Token != stored.Token || again.Revision != ren.Revision {
		t.Fatalf("retry after a renewal: %+v, %v; want token %d at revision %d", again, err, stored.Token, ren.Revision)
	}
	rel := kvlease.ReleaseRequest{Name: req.Name, Holder: "h1", Token: got.Token, Revision: ren.Revision, Secret: secret}
	if err := st.Release(ctx, rel); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, rel); err != nil {
		t.Errorf("retried release: %v, want success", err)
	}
	wrong := rel
	wrong.Token++
	if err := st.Release(ctx, wrong); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("release of a tenure that never was: %v, want ErrNotFound", err)
	}

	// A late attempt of the request, after its tenure ended, grants nothing,
	// through this store (which knows the tombstone) or another.
	for _, s := range []*kvlease.Store{st, direct} {
		if _, err := s.Grant(ctx, req); !errors.Is(err, kvlease.ErrRequestUsed) {
			t.Errorf("late attempt after release: %v, want ErrRequestUsed", err)
		}
	}
	if cur, err := direct.Get(ctx, req.Name); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("lease after the late attempts: %+v, %v; want none", cur, err)
	}
}

// A retried grant whose message ID the stream has stored aborts an atomic
// batch (err 10201, naming no message): the batch is split so that the
// retry is told its tenure ended and every other grant in it succeeds.
func TestBatchedRetryOfUsedRequest(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), forcedBatching())
	ctx := t.Context()
	rid, secret := kvlease.NewRequestID()
	used := kvlease.GrantRequest{Name: "dup.used", Holder: "h", Duration: 10 * time.Second, RequestID: rid, Secret: secret}
	rec, err := st.Grant(ctx, used)
	if err != nil {
		t.Fatal(err)
	}
	// Released through another store: st, which knows nothing of the
	// release, sends the retry (it would answer it itself from the
	// release's tombstone, which names the request).
	other := kvleasetest.OpenStore(t, srv.ClientURL())
	if err := other.Release(ctx, kvlease.ReleaseRequest{Name: rec.Name, Holder: "h", Token: rec.Token, Revision: rec.Revision, Secret: secret}); err != nil {
		t.Fatal(err)
	}

	log := &sendLog{}
	kvlease.SetSendHook(st, log.hook)
	const n = 8
	holding := make(chan struct{})
	log.hold = holdUntilQueued(t, st, n, holding)
	errs := make([]error, n)
	var usedErr error
	var wg sync.WaitGroup
	for i := range n {
		if i == 1 {
			<-holding
		}
		wg.Go(func() {
			id, sec := kvlease.NewRequestID()
			_, errs[i] = st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("dup.%d", i), Holder: "h", Duration: 10 * time.Second,
				RequestID: id, Secret: sec})
		})
	}
	wg.Go(func() { _, usedErr = st.Grant(ctx, used) })
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("grant dup.%d failed because of another: %v", i, err)
		}
	}
	if !errors.Is(usedErr, kvlease.ErrRequestUsed) {
		t.Errorf("retry of a used request in a batch: %v, want ErrRequestUsed", usedErr)
	}
	if log.batchCount() == 0 {
		t.Error("no batch went out: the test did not exercise the batch path")
	}
	if _, err := st.Get(ctx, used.Name); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("used request's lease: %v, want none", err)
	}
}

// Acquire sends a grant that got no answer again, with the same request
// ID: when the first attempt was stored and its reply lost, the holder gets
// that tenure (its token), not "held" by itself, and nothing is left
// orphaned.
func TestAcquireRecoversLostGrantReply(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	st := kvleasetest.OpenStore(t, proxy.URL())
	direct := kvleasetest.OpenStore(t, srv.ClientURL())
	ctx := t.Context()
	w, err := direct.Watch(ctx, "lost.")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	proxy.DropReplies()
	type result struct {
		l   *kvlease.Lease
		err error
	}
	done := make(chan result, 1)
	before := time.Now()
	go func() {
		l, err := kvlease.Acquire(ctx, st, "lost.acquire", "h1", 10*time.Second, kvlease.WithAttemptTimeout(300*time.Millisecond))
		done <- result{l, err}
	}()
	stored := waitGranted(t, w, "lost.acquire")
	healed := time.Now() // every later attempt is sent after this
	proxy.Heal()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	l := r.l
	if l.Token() != stored.Token || !l.Record().Recovered {
		t.Fatalf("lease token %d (recovered %v), want the stored tenure's %d", l.Token(), l.Record().Recovered, stored.Token)
	}
	// The deadline counts from the first attempt, sent before the grant was
	// seen stored, not from the retry that was answered, sent after the heal.
	v := kvlease.HolderValidity(10*time.Second, kvlease.DefaultClockRate, l.Margin())
	if dl := l.Deadline(); dl.Before(before.Add(v)) || !dl.Before(healed.Add(v)) {
		t.Errorf("deadline %v: want from the first attempt, in [%v, %v)", dl, before.Add(v), healed.Add(v))
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew the recovered lease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Get(ctx, "lost.acquire"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("after release: %v, want the lease free", err)
	}
}

// The deadline of a recovered grant counts from the send of the first
// attempt, the earliest moment the grantor can have stored it, not from the
// retry that was answered.
func TestAcquireRecoveredDeadlineFromFirstAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Second
		g := kvleasetest.NewFakeGrantor()
		g.SetMode(kvleasetest.FakeLoseGrantReply)
		t0 := time.Now()
		var l *kvlease.Lease
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err = kvlease.Acquire(t.Context(), g, "job", "h", d)
		}()
		synctest.Wait() // the first attempt was stored and its reply lost; Acquire waits to retry
		if g.Grants() != 1 {
			t.Fatalf("%d grants stored, want 1", g.Grants())
		}
		g.SetMode(kvleasetest.FakeOK)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if !time.Now().After(t0) {
			t.Fatal("the retry was not later than the first attempt: the test shows nothing")
		}
		want := t0.Add(kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d)))
		if !l.Deadline().Equal(want) || !l.Record().Recovered || g.Grants() != 1 {
			t.Errorf("deadline %v (recovered %v, %d grants), want %v: first send + D(1-ρ) - m_h, one grant",
				l.Deadline(), l.Record().Recovered, g.Grants(), want)
		}
	})
}

// A recovered tenure whose holder deadline (from the first attempt) has
// already passed is of no use to the holder: Acquire gives it back and asks
// anew, rather than leave it held by nobody for its TTL.
func TestAcquireRecoveredTooLateAsksAnew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		g.SetMode(kvleasetest.FakeLoseGrantReply)
		var l *kvlease.Lease
		var err error
		done := make(chan struct{})
		go func() {
			defer close(done)
			l, err = kvlease.Acquire(t.Context(), g, "job", "h", d)
		}()
		synctest.Wait()
		first, _ := g.Lookup("job")
		// Keep losing replies until the first attempt's validity is spent
		// (the stored tenure itself stays live: its TTL is longer).
		time.Sleep(kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d)))
		synctest.Wait()
		g.SetMode(kvleasetest.FakeOK)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() == first.Token || l.Remaining() <= 0 {
			t.Errorf("token %d (first tenure %d), remaining %v: want a new tenure with time left", l.Token(), first.Token, l.Remaining())
		}
		if rel := g.Releases(); len(rel) != 1 || rel[0].Token != first.Token {
			t.Errorf("releases %+v, want the spent tenure %d given back", rel, first.Token)
		}
	})
}

// Bad request IDs and secrets are refused before anything is written.
func TestGrantBadRequestID(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	id, secret := kvlease.NewRequestID()
	for _, c := range []struct{ name, id, secret string }{
		{"no secret", id, ""},
		{"short secret", id, "short"},
		{"long secret", id, strings.Repeat("s", kvlease.MaxSecretLen+1)},
		{"secret with a space", id, "0123456789 abcdef"},
		{"long id", strings.Repeat("i", kvlease.MaxRequestIDLen+1), secret},
		{"id with a slash", "a/b", secret},
		{"id with a space", "a b", secret},
	} {
		_, err := st.Grant(ctx, kvlease.GrantRequest{Name: "bad.rid", Holder: "h", Duration: 5 * time.Second, RequestID: c.id, Secret: c.secret})
		if !errors.Is(err, kvlease.ErrInvalidRequestID) {
			t.Errorf("%s: %v, want ErrInvalidRequestID", c.name, err)
		}
		if c.secret != "" && strings.Contains(fmt.Sprint(err), c.secret) {
			t.Errorf("%s: the error shows the secret: %v", c.name, err)
		}
	}
	if _, err := st.Get(ctx, "bad.rid"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("after refused grants: %v, want nothing written", err)
	}
	if err := kvlease.ValidateRequestID("7d9c2f3e-1b4a-4c2e-9f00-5a6b7c8d9e0f"); err != nil {
		t.Errorf("a UUID: %v", err)
	}
}

// lateGrantor is a FakeGrantor behind a link that loses some grant
// attempts (lost, numbered from 1): they get no answer, and the one
// numbered late is carried out late, after the holder of the lease at the
// time has released it, within the window the grantor promises
// (LateWindow).
type lateGrantor struct {
	*kvleasetest.FakeGrantor
	window time.Duration
	other  kvlease.Record // the lease's holder when the attempts were sent
	lost   []int
	late   int
	calls  int
}

func (g *lateGrantor) LateWindow() (time.Duration, bool) { return g.window, true }

func (g *lateGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	g.calls++
	if !slices.Contains(g.lost, g.calls) {
		return g.FakeGrantor.Grant(ctx, req)
	}
	<-ctx.Done() // no answer
	if g.calls != g.late {
		return kvlease.Record{}, fmt.Errorf("%w: grant: no reply", kvlease.ErrUnavailable)
	}
	time.AfterFunc(g.window/2, func() { // carried out late: the lease is free by then
		_ = g.FakeGrantor.Release(context.Background(), kvlease.ReleaseRequest{Name: g.other.Name, Holder: g.other.Holder,
			Token: g.other.Token, Revision: g.other.Revision})
		_, _ = g.FakeGrantor.Grant(context.Background(), req)
	})
	return kvlease.Record{}, fmt.Errorf("%w: grant: no reply", kvlease.ErrUnavailable)
}

// A retry refused "held" while an unanswered attempt can still be carried
// out is not final: Acquire waits until the grantor's late window has
// passed and asks once more with the same request ID, and so gets the
// tenure the late attempt made, instead of leaving it to nobody.
//
// The attempt that asks once more can itself go unanswered (the fault
// that lost the first is still on) and be the one carried out late: the
// refusal after it is not final either. Before that was waited out too, a
// nemesis run left such a tenure to nobody.
func TestAcquireWaitsOutLateAttempts(t *testing.T) {
	for _, c := range []struct {
		name string
		lost []int
		late int
	}{
		{"first attempt late", []int{1}, 1},
		{"the attempt after the wait late", []int{1, 3}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const d = 10 * time.Second
				fake := kvleasetest.NewFakeGrantor()
				other, err := fake.Grant(t.Context(), kvlease.GrantRequest{Name: "job", Holder: "other", Duration: d})
				if err != nil {
					t.Fatal(err)
				}
				g := &lateGrantor{FakeGrantor: fake, window: 3 * time.Second, other: other, lost: c.lost, late: c.late}
				l, err := kvlease.Acquire(t.Context(), g, "job", "h", d, kvlease.WithAttemptTimeout(time.Second))
				if err != nil {
					t.Fatalf("acquire: %v after %d calls (the late attempt's tenure is left to nobody)", err, g.calls)
				}
				cur, _ := fake.Lookup("job")
				if l.Token() != cur.Token || cur.Holder != "h" || !l.Record().Recovered || g.calls < c.late+2 {
					t.Errorf("lease token %d (recovered %v, %d calls), grantor holds %+v", l.Token(), l.Record().Recovered, g.calls, cur)
				}
			})
		})
	}
}

// heldByOther is a FakeGrantor on which "other" holds "job" for d.
func heldByOther(t *testing.T, d time.Duration) (*kvleasetest.FakeGrantor, kvlease.Record) {
	t.Helper()
	fake := kvleasetest.NewFakeGrantor()
	other, err := fake.Grant(t.Context(), kvlease.GrantRequest{Name: "job", Holder: "other", Duration: d})
	if err != nil {
		t.Fatal(err)
	}
	return fake, other
}

// A refusal to an attempt sent after every unanswered attempt's late
// window is final, and leaves nothing to give back: Acquire sent the
// request once more as it returned (found in review), which, had the
// lease come free, granted and released a throwaway tenure.
func TestAcquireGivesNothingBackAfterTheLateWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Second
		fake, other := heldByOther(t, d)
		// Attempt 1 unanswered and never carried out; 2, sent within its
		// window, and 3, sent after it, refused.
		g := &lateGrantor{FakeGrantor: fake, window: 3 * time.Second, other: other, lost: []int{1}}
		if _, err := kvlease.Acquire(t.Context(), g, "job", "h", d, kvlease.WithAttemptTimeout(time.Second)); !errors.Is(err, kvlease.ErrHeld) {
			t.Fatalf("acquire: %v, want held", err)
		}
		if g.calls != 3 {
			t.Errorf("%d grant calls, want 3 (no give-back)", g.calls)
		}
	})
}

// A retry of a grant whose tenure was released or revoked is told
// ErrRequestUsed after the server restarts, cleanly or not, though the
// restarted server has forgotten the grant's message ID (it rebuilds its
// duplicate window from the messages still stored, and the release rolled
// the grant up): the end names the request. Before, the retry was granted
// a second tenure (found by an outside client).
func TestRequestUsedAfterServerRestart(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL)
	grant := func(name string) (kvlease.GrantRequest, kvlease.Record) {
		t.Helper()
		rid, secret := kvlease.NewRequestID()
		req := kvlease.GrantRequest{Name: name, Holder: "h", Duration: time.Minute, RequestID: rid, Secret: secret}
		rec, err := st.Grant(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return req, rec
	}
	released, rec := grant("used.released")
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: rec.Name, Holder: "h", Token: rec.Token,
		Revision: rec.Revision, Secret: released.Secret}); err != nil {
		t.Fatal(err)
	}
	revoked, _ := grant("used.revoked")
	if _, err := st.Revoke(ctx, revoked.Name, "test"); err != nil {
		t.Fatal(err)
	}
	for _, restart := range []struct {
		how string
		do  func()
	}{{"clean restart", srv.Stop}, {"SIGKILL", srv.Kill}} {
		restart.do()
		srv.Restart()
		// A Store that knows nothing of the tenures: a grantor node
		// started with the server.
		fresh := kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate())
		for _, req := range []kvlease.GrantRequest{released, revoked} {
			if got, err := fresh.Grant(ctx, req); !errors.Is(err, kvlease.ErrRequestUsed) {
				t.Errorf("after a %s, a retry of the grant of %s: %+v, %v; want ErrRequestUsed", restart.how, req.Name, got, err)
			}
		}
	}
	// Another request for the lease is granted as ever.
	rid, secret := kvlease.NewRequestID()
	if _, err := kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate()).Grant(ctx, kvlease.GrantRequest{Name: released.Name, Holder: "h", Duration: time.Minute,
		RequestID: rid, Secret: secret}); err != nil {
		t.Errorf("a new request for the released lease: %v", err)
	}
}

// notSentGrantor is a lateGrantor whose attempt notSent is not sent (a
// client not connected, or without the clock offset a deadline needs),
// and which knows no late window then.
type notSentGrantor struct {
	*lateGrantor
	notSent int
}

func (g *notSentGrantor) LateWindow() (time.Duration, bool) { return g.window, g.calls != g.notSent }

func (g *notSentGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	if g.calls+1 == g.notSent {
		g.calls++
		return kvlease.Record{}, fmt.Errorf("%w: %w: grant: no offset yet", kvlease.ErrUnavailable, kvlease.ErrNotSent)
	}
	return g.lateGrantor.Grant(ctx, req)
}

// unsentUntilGrantor sends no grant (ErrNotSent: not connected) until
// its time, then grants as the fake does.
type unsentUntilGrantor struct {
	*kvleasetest.FakeGrantor
	until time.Time
}

func (g unsentUntilGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	if time.Now().Before(g.until) {
		return kvlease.Record{}, fmt.Errorf("%w: %w: grant: not connected to NATS (RECONNECTING)", kvlease.ErrUnavailable, kvlease.ErrNotSent)
	}
	return g.FakeGrantor.Grant(ctx, req)
}

// A holder's deadline counts from the first attempt that was sent, not
// from attempts that never went (ErrNotSent): after an outage longer than
// the lease's validity, the grant answered as the connection came back
// was taken for a late answer, given back and asked for again, a tenure
// held by no one that observers saw as a leader (found by an outside
// client: a candidate, its server SIGKILLed for 15 s, was granted token
// 674, released it and led with 677 a second later).
func TestAcquireDeadlineCountsFromTheFirstAttemptSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 2 * time.Second
		fake := kvleasetest.NewFakeGrantor()
		g := unsentUntilGrantor{FakeGrantor: fake, until: time.Now().Add(3 * d)}
		l, err := kvlease.Acquire(t.Context(), g, "job", "h", d)
		if err != nil {
			t.Fatal(err)
		}
		if n, rel := fake.Grants(), len(fake.Releases()); n != 1 || rel != 0 {
			t.Errorf("%d grants and %d releases for one Acquire; want 1 and 0 (the first answer given back as late)", n, rel)
		}
		if got, want := l.Remaining(), kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d)); got != want {
			t.Errorf("remaining %v after the grant; want the whole validity %v, counted from the attempt that was sent", got, want)
		}
	})
}

// An attempt that was never sent (ErrNotSent) is no attempt to wait out,
// and does not make Acquire forget the late window of the ones that were:
// a refusal after it is still waited out (it took the late window as
// unknown and returned the refusal at once, leaving the late attempt's
// tenure to nobody; found by a review).
func TestAcquireNotSentAttemptKeepsTheLateWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 10 * time.Second
		fake, other := heldByOther(t, d)
		g := &notSentGrantor{lateGrantor: &lateGrantor{FakeGrantor: fake, window: 3 * time.Second, other: other, lost: []int{1}, late: 1},
			notSent: 2}
		l, err := kvlease.Acquire(t.Context(), g, "job", "h", d, kvlease.WithAttemptTimeout(time.Second))
		if err != nil {
			t.Fatalf("acquire: %v after %d calls (the late attempt's tenure is left to nobody)", err, g.calls)
		}
		if cur, _ := fake.Lookup("job"); l.Token() != cur.Token || cur.Holder != "h" || !l.Record().Recovered {
			t.Errorf("lease token %d (recovered %v), grantor holds %+v", l.Token(), l.Record().Recovered, cur)
		}
	})
}
