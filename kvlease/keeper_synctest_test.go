package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// lostRecorder records OnLost calls.
type lostRecorder struct {
	mu    sync.Mutex
	calls []lostCall
}

type lostCall struct {
	at  time.Time
	err error
}

func (r *lostRecorder) onLost(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, lostCall{time.Now(), err})
}

func (r *lostRecorder) get() []lostCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lostCall(nil), r.calls...)
}

func mustAcquire(t *testing.T, g kvlease.Grantor, name string, d time.Duration, opts ...kvlease.LeaseOption) *kvlease.Lease {
	t.Helper()
	l, err := kvlease.Acquire(t.Context(), g, name, "holder-1", d, opts...)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", name, d, err)
	}
	return l
}

// keepRecording keeps l with a recorder of OnLost calls.
func keepRecording(t *testing.T, l *kvlease.Lease) (*kvlease.Keeper, *lostRecorder) {
	t.Helper()
	lost := &lostRecorder{}
	k, err := kvlease.Keep(t.Context(), l, kvlease.WithOnLost(lost.onLost))
	if err != nil {
		t.Fatal(err)
	}
	return k, lost
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestKeeperRenewsEveryThird(t *testing.T) {
	for _, d := range []time.Duration{1500 * time.Millisecond, 3 * time.Second, 10 * time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := kvleasetest.NewFakeGrantor()
				start := time.Now()
				l := mustAcquire(t, g, "svc/web", d)
				token := l.Token()
				k, err := kvlease.Keep(t.Context(), l)
				if err != nil {
					t.Fatal(err)
				}
				interval := d / 3
				// Step through 10 D in small steps: the lease must be valid
				// at every one of them.
				step := d / 30
				for now := time.Duration(0); now < 10*d; now += step {
					time.Sleep(step)
					synctest.Wait()
					if err := l.Check(); err != nil {
						t.Fatalf("at %v: Check: %v", time.Since(start), err)
					}
					if isClosed(k.Done()) || k.Context().Err() != nil {
						t.Fatalf("at %v: keeper stopped: %v", time.Since(start), k.Err())
					}
				}
				// Stop between the 30th and 31st renewal.
				time.Sleep(time.Until(start.Add(10*d + interval/2)))
				synctest.Wait()
				// Renewals at exactly i·D/3 for i = 1..30 (10 D = 30 intervals),
				// each naming the revision the previous one returned (the
				// grantor writes nothing else, so revisions go up by one).
				calls := g.Renewals()
				if len(calls) != 30 {
					t.Fatalf("%d renewals in 10 D, want 30", len(calls))
				}
				for i, c := range calls {
					if want := time.Duration(i+1) * interval; c.At.Sub(start) != want {
						t.Errorf("renewal %d at %v, want %v", i+1, c.At.Sub(start), want)
					}
					if c.Mode != kvleasetest.FakeOK || c.Req.Token != token || c.Req.Revision != uint64(token)+uint64(i) {
						t.Errorf("renewal %d: token %d revision %d, want token %d revision %d",
							i+1, c.Req.Token, c.Req.Revision, token, uint64(token)+uint64(i))
					}
				}
				if l.Token() != token {
					t.Errorf("token changed across renewals: %d -> %d", token, l.Token())
				}
				// The deadline follows the last renewal (sent at 30 intervals).
				w := kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
				if got, want := l.Deadline().Sub(start), 30*interval+w; got != want {
					t.Errorf("deadline at %v, want %v", got, want)
				}
				st := k.Stats()
				if st.Renewals != 30 || st.Failures != 0 || st.ConsecutiveFailures != 0 || st.SpuriousLosses != 0 {
					t.Errorf("stats = %+v, want 30 renewals and no failures", st)
				}
				if err := k.Close(context.Background()); err != nil {
					t.Fatalf("Close: %v", err)
				}
			})
		})
	}
}

func TestKeeperUnreachableLosesAtDeadline(t *testing.T) {
	const d = 3 * time.Second
	tests := []struct {
		name string
		mode kvleasetest.FakeMode
		// goodRenewals succeed before the grantor goes away.
		goodRenewals int
	}{
		{"blocking from the start", kvleasetest.FakeUnreachable, 0},
		{"blocking after two renewals", kvleasetest.FakeUnreachable, 2},
		{"failing fast from the start", kvleasetest.FakeFailFast, 0},
		{"failing fast after two renewals", kvleasetest.FakeFailFast, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := kvleasetest.NewFakeGrantor()
				start := time.Now()
				l := mustAcquire(t, g, "svc/web", d)
				k, lost := keepRecording(t, l)
				interval := kvlease.DefaultRenewInterval(d)
				// Cut the grantor off halfway between renewals.
				time.Sleep(time.Duration(tt.goodRenewals)*interval + interval/2)
				g.SetMode(tt.mode)
				lastSent := time.Duration(tt.goodRenewals) * interval
				deadline := lastSent + kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
				if got := l.Deadline().Sub(start); got != deadline {
					t.Fatalf("deadline at %v, want %v", got, deadline)
				}

				<-k.Done()
				lostAt := time.Since(start)
				if diff := (lostAt - deadline).Abs(); diff > time.Millisecond {
					t.Errorf("Done closed at %v, want the holder deadline %v (off by %v)", lostAt, deadline, diff)
				}
				if k.Context().Err() == nil {
					t.Error("Context not cancelled after Done closed")
				}
				var le *kvlease.LeaseExpiredError
				if err := k.Err(); !errors.As(err, &le) || !errors.Is(err, kvlease.ErrExpired) {
					t.Fatalf("Err() = %v, want a *LeaseExpiredError", err)
				}
				if le.Name != "svc/web" || le.Token != l.Token() || le.Remaining > 0 {
					t.Errorf("LeaseExpiredError = %+v", *le)
				}
				// It says why: the renewals that went unanswered, and the
				// last one's error; the loss is not "unavailable" itself.
				if le.Unanswered < 1 || !errors.Is(le.LastFailure, kvlease.ErrUnavailable) ||
					!strings.Contains(le.Error(), "unanswered") || errors.Is(k.Err(), kvlease.ErrUnavailable) {
					t.Errorf("Err() = %v (%d unanswered, last %v): want the unanswered renewals and the last one's error, not ErrUnavailable",
						k.Err(), le.Unanswered, le.LastFailure)
				}
				if cause := context.Cause(k.Context()); !errors.Is(cause, kvlease.ErrExpired) {
					t.Errorf("context cause = %v, want ErrExpired", cause)
				}
				if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
					t.Errorf("Check after loss = %v, want ErrExpired", err)
				}

				synctest.Wait() // let OnLost run
				calls := lost.get()
				if len(calls) != 1 {
					t.Fatalf("OnLost called %d times, want 1", len(calls))
				}
				if calls[0].err != k.Err() {
					t.Errorf("OnLost(%v), want Err() = %v", calls[0].err, k.Err())
				}
				if d := (calls[0].at.Sub(start) - deadline).Abs(); d > time.Millisecond {
					t.Errorf("OnLost at %v, want %v", calls[0].at.Sub(start), deadline)
				}

				renews := g.Renewals()
				failed := 0
				for i, c := range renews {
					if at := c.At.Sub(start); at >= deadline {
						t.Errorf("renew call %d sent at %v, at or after the deadline %v", i, at, deadline)
					}
					if c.Mode != kvleasetest.FakeOK {
						failed++
					}
				}
				if failed == 0 {
					t.Error("no renewal was attempted while the grantor was unreachable")
				}
				if le.Unanswered > failed {
					t.Errorf("%d renewals unanswered, more than the %d that failed", le.Unanswered, failed)
				}
				st := k.Stats()
				if st.Renewals != int64(tt.goodRenewals) {
					t.Errorf("Stats().Renewals = %d, want %d", st.Renewals, tt.goodRenewals)
				}
				if st.Failures != int64(failed) {
					t.Errorf("Stats().Failures = %d, want %d (calls that failed)", st.Failures, failed)
				}
				// No renewal after loss, however long we wait.
				time.Sleep(3 * d)
				if n := len(g.Renewals()); n != len(renews) {
					t.Errorf("%d renew calls after the lease was lost", n-len(renews))
				}
				// The lease was lost, not closed: Close does not release.
				g.SetMode(kvleasetest.FakeOK)
				if err := k.Close(context.Background()); err != nil {
					t.Errorf("Close after loss: %v", err)
				}
				if r := g.Releases(); len(r) != 0 {
					t.Errorf("Close after loss released: %+v", r)
				}
			})
		})
	}
}

// A renewal that goes unanswered (a cluster electing a new stream leader
// after its leader died: 4-10 s on two cores) is retried often enough that
// the lease is renewed within 2.5 s of the grantor answering again, while
// the deadline allows: attempts are bounded by 2 s and the waits between
// them by 0.5 s. With half an interval per attempt and waits doubling to
// half an interval, a 20 s lease's attempts after its due renewal began at
// 0, 4 and 8.7 s, and a leader back at 4.5 s was used only at 8.7 s: three
// of ten kills of a stream leader cost holders of 20 s leases their
// authority (found by an outside client).
func TestKeeperRetriesSoonAfterTheGrantorReturns(t *testing.T) {
	const d = 20 * time.Second
	interval := kvlease.DefaultRenewInterval(d)
	for _, back := range []time.Duration{time.Second, 4500 * time.Millisecond, 7 * time.Second} {
		t.Run(fmt.Sprintf("back after %v", back), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := kvleasetest.NewFakeGrantor()
				l := mustAcquire(t, g, "svc/leader", d)
				k, _ := keepRecording(t, l)
				time.Sleep(interval - time.Millisecond)
				g.SetMode(kvleasetest.FakeUnreachable) // from just before the renewal is due
				time.Sleep(time.Millisecond + back)
				returned := time.Now()
				g.SetMode(kvleasetest.FakeOK)
				for k.Stats().Renewals == 0 {
					select {
					case <-k.Done():
						t.Fatalf("lost %v after the grantor returned: %v", time.Since(returned), k.Err())
					case <-time.After(10 * time.Millisecond):
					}
				}
				if took := time.Since(returned); took > 2500*time.Millisecond {
					t.Errorf("renewed %v after the grantor returned, want within 2.5 s", took)
				}
				_ = k.Close(context.Background())
			})
		})
	}
}

// Each failed attempt that leaves the tenure held is reported, with the
// time left, so that a holder's log shows the attempts before a loss.
func TestKeeperReportsFailedAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		var remaining []time.Duration
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithOnRenewFailure(func(err error, left time.Duration) {
			if !errors.Is(err, kvlease.ErrUnavailable) {
				t.Errorf("reported %v, want an unavailable error", err)
			}
			remaining = append(remaining, left)
		}))
		if err != nil {
			t.Fatal(err)
		}
		g.SetMode(kvleasetest.FakeFailFast)
		<-k.Done() // lost at its deadline, every attempt failed
		if n := k.Stats().Failures; n < 2 || len(remaining) != int(n) {
			t.Fatalf("%d failures reported, %d counted; want every one of several", len(remaining), n)
		}
		for i, left := range remaining {
			if left <= 0 || i > 0 && left >= remaining[i-1] {
				t.Errorf("reported time left %v", remaining)
				break
			}
		}
	})
}

func TestKeeperRefusedLosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "svc/web", d)
		k, lost := keepRecording(t, l)
		g.SetMode(kvleasetest.FakeRefuse)
		<-k.Done()
		interval := kvlease.DefaultRenewInterval(d)
		if got := time.Since(start); got != interval {
			t.Errorf("lost at %v, want at the first renewal %v (deadline is %v)", got, interval, l.Deadline().Sub(start))
		}
		if err := k.Err(); !errors.Is(err, kvlease.ErrNotHolder) {
			t.Errorf("Err() = %v, want ErrNotHolder", err)
		}
		if cause := context.Cause(k.Context()); !errors.Is(cause, kvlease.ErrNotHolder) {
			t.Errorf("context cause = %v, want ErrNotHolder", cause)
		}
		synctest.Wait()
		if calls := lost.get(); len(calls) != 1 || !errors.Is(calls[0].err, kvlease.ErrNotHolder) {
			t.Errorf("OnLost calls = %+v, want one with ErrNotHolder", calls)
		}
		st := k.Stats()
		if st.Failures != 1 || st.Renewals != 0 || st.ConsecutiveFailures != 1 {
			t.Errorf("Stats() = %+v, want 1 failure, 0 renewals", st)
		}
		if n := len(g.Renewals()); n != 1 {
			t.Errorf("%d renew calls, want 1", n)
		}
	})
}

// A tenure ended elsewhere (revoked) is lost at the renewal a hint on the
// renew-now channel starts, not at the next interval; a hint while the
// lease is held only renews it early.
func TestKeeperRenewNowFindsTheEndAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 30 * time.Second
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "svc/web", d)
		now := make(chan struct{}, 1)
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithRenewNow(now))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		now <- struct{}{} // held: renewed early
		synctest.Wait()
		if n := len(g.Renewals()); n != 1 || isClosed(k.Done()) {
			t.Fatalf("after a hint while held: %d renewals, lost %v; want 1, held", n, isClosed(k.Done()))
		}
		if got, want := l.Deadline().Sub(start), time.Second+kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d)); got != want {
			t.Fatalf("deadline %v after the early renewal, want %v", got, want)
		}
		time.Sleep(time.Second)
		rec := l.Record()
		if err := g.Release(t.Context(), kvlease.ReleaseRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token, Revision: rec.Revision}); err != nil {
			t.Fatal(err) // ended elsewhere (a revocation)
		}
		ended := time.Since(start)
		now <- struct{}{}
		<-k.Done()
		if got := time.Since(start); got != ended {
			t.Errorf("lost at %v, want at once when told, %v (the next interval was %v)", got, ended, time.Second+kvlease.DefaultRenewInterval(d))
		}
		if err := k.Err(); !errors.Is(err, kvlease.ErrNotFound) {
			t.Errorf("Err() = %v, want ErrNotFound", err)
		}
	})
}

// A closed renew-now channel is one hint, not a hint every moment: the
// keeper renewed about 1,200 times a second (found by an outside client).
func TestKeeperClosedRenewNowIsOneHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 30 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		now := make(chan struct{})
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithRenewNow(now))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = k.Close(t.Context()) }()
		time.Sleep(time.Second)
		close(now)
		time.Sleep(time.Second) // well before the next interval (10 s)
		synctest.Wait()
		if n := len(g.Renewals()); n != 1 {
			t.Fatalf("%d renewals a second after the channel was closed, want 1", n)
		}
	})
}

// A flood of hints (forged events on the lease's subject) renews at most
// once per hint gap, not once per hint: 1,168 synced renewals in 3 s,
// found by an outside client. The last hint still renews.
func TestKeeperRenewNowFloodIsPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 30 * time.Second // renewed every 10 s; hints at most every 100 ms
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		now := make(chan struct{}, 1)
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithRenewNow(now))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = k.Close(t.Context()) }()
		for range 1000 { // a hint every millisecond for a second
			select {
			case now <- struct{}{}:
			default:
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // the last hint's renewal, at the gap's end
		synctest.Wait()
		if n := len(g.Renewals()); n < 9 || n > 12 {
			t.Fatalf("%d renewals for a second of hints, want about 10 (one per 100 ms)", n)
		}
	})
}

func TestKeeperSpuriousLoss(t *testing.T) {
	// A renewal that succeeded at the grantor but whose reply was lost leaves
	// the holder naming an old revision: the next renewal is refused with
	// ErrStaleRevision, which is a loss, and counted as spurious.
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		// Someone renews behind the holder's back with its credentials.
		rec := l.Record()
		if _, err := g.Renew(t.Context(), kvlease.RenewRequest{
			Name: rec.Name, Holder: rec.Holder, Token: rec.Token, Revision: rec.Revision, Duration: d,
		}); err != nil {
			t.Fatal(err)
		}
		k, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		<-k.Done()
		if err := k.Err(); !errors.Is(err, kvlease.ErrStaleRevision) || !errors.Is(err, kvlease.ErrNotHolder) {
			t.Errorf("Err() = %v, want ErrNotHolder and ErrStaleRevision", err)
		}
		if st := k.Stats(); st.SpuriousLosses != 1 || st.Failures != 1 {
			t.Errorf("Stats() = %+v, want 1 spurious loss", st)
		}
	})
}

// A renewal stored at the grantor whose reply was lost leaves the holder
// naming an old revision. The lease knows it sent a renewal that went
// unanswered, so the next attempt's ErrStaleRevision is recovered by renewing
// the current revision: the keeper keeps the lease, and the deadline only
// ever moves with a confirmed renewal.
func TestKeeperRecoversLostReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		k, lost := keepRecording(t, l)
		g.SetMode(kvleasetest.FakeLoseReply)
		time.Sleep(kvlease.DefaultRenewInterval(d) + time.Millisecond) // the renewal is stored, its reply lost
		synctest.Wait()
		before, held := l.Deadline(), l.Record().Revision
		cur, _ := g.Lookup("svc/web")
		stored := cur.Revision
		if stored <= held {
			t.Fatalf("grantor at revision %d, holder at %d: the lost renewal was not stored", stored, held)
		}
		g.SetMode(kvleasetest.FakeOK)
		time.Sleep(kvlease.DefaultRenewInterval(d)) // retries, is told the revision is stale, recovers
		synctest.Wait()
		if calls := lost.get(); len(calls) != 0 {
			t.Fatalf("lost the lease: %v", calls[0].err)
		}
		var recovered bool
		for _, c := range g.Renewals() {
			recovered = recovered || c.Req.Revision == stored && c.Mode == kvleasetest.FakeOK
		}
		if !recovered {
			t.Errorf("no renewal named revision %d, which the lost renewal stored: %+v", stored, g.Renewals())
		}
		if !l.Deadline().After(before) {
			t.Errorf("deadline %v did not move past %v after recovery", l.Deadline(), before)
		}
		if st := k.Stats(); st.SpuriousLosses != 0 || st.ConsecutiveFailures != 0 || st.Failures != 1 {
			t.Errorf("Stats() = %+v, want one failure (the lost reply), none now, no spurious loss", st)
		}
	})
}

func TestKeeperCloseReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		k, lost := keepRecording(t, l)
		time.Sleep(2*kvlease.DefaultRenewInterval(d) + time.Millisecond) // two renewals
		rec := l.Record()
		if rec.Revision == uint64(rec.Token) {
			t.Fatalf("no renewal happened: %+v", rec)
		}
		if err := k.Close(context.Background()); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if !isClosed(k.Done()) || k.Context().Err() == nil {
			t.Error("Close returned with Done open or Context live")
		}
		if err := k.Err(); !errors.Is(err, kvlease.ErrClosed) {
			t.Errorf("Err() = %v, want ErrClosed", err)
		}
		rel := g.Releases()
		// The release presents the secret the grant was sent with (Acquire
		// makes one per request).
		want := kvlease.ReleaseRequest{Name: "svc/web", Holder: "holder-1", Token: rec.Token, Revision: rec.Revision, Secret: rec.Secret}
		if rec.Secret == "" {
			t.Error("the lease has no secret: Acquire sent none")
		}
		if len(rel) != 1 || rel[0] != want {
			t.Errorf("grantor saw releases %+v, want [%+v]", rel, want)
		}
		if _, ok := g.Lookup("svc/web"); ok {
			t.Error("lease still live at the grantor after Close")
		}
		if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
			t.Errorf("Check after Close = %v, want ErrExpired", err)
		}
		renews := len(g.Renewals())
		time.Sleep(3 * d)
		synctest.Wait()
		if n := len(g.Renewals()); n != renews {
			t.Errorf("%d renewals after Close", n-renews)
		}
		if calls := lost.get(); len(calls) != 0 {
			t.Errorf("OnLost called after Close: %+v", calls)
		}
		// Close twice is harmless.
		if err := k.Close(context.Background()); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if n := len(g.Releases()); n != 1 {
			t.Errorf("%d releases after a second Close, want 1", n)
		}
	})
}

func TestKeeperOrphanDoesNotRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "svc/web", d)
		k, lost := keepRecording(t, l)
		interval := kvlease.DefaultRenewInterval(d)
		time.Sleep(interval + interval/2) // one renewal
		k.Orphan()
		if !isClosed(k.Done()) || k.Context().Err() == nil {
			t.Error("Orphan returned with Done open or Context live")
		}
		if err := k.Err(); !errors.Is(err, kvlease.ErrClosed) {
			t.Errorf("Err() = %v, want ErrClosed", err)
		}
		if rel := g.Releases(); len(rel) != 0 {
			t.Errorf("Orphan released: %+v", rel)
		}
		if _, ok := g.Lookup("svc/web"); !ok {
			t.Error("lease not live at the grantor after Orphan")
		}
		// The holder keeps its right until its deadline, and no longer.
		deadline := l.Deadline()
		if got, want := deadline.Sub(start), interval+kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d)); got != want {
			t.Errorf("deadline %v, want %v", got, want)
		}
		if err := l.Check(); err != nil {
			t.Errorf("Check after Orphan, before deadline: %v", err)
		}
		renews := len(g.Renewals())
		time.Sleep(time.Until(deadline))
		if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
			t.Errorf("Check at deadline after Orphan = %v, want ErrExpired", err)
		}
		if n := len(g.Renewals()); n != renews {
			t.Errorf("%d renewals after Orphan", n-renews)
		}
		// The grantor lapses the key later, by its TTL.
		time.Sleep(kvlease.ServerTTL(d, kvleasetest.FakeGrantorMargin))
		if _, ok := g.Lookup("svc/web"); ok {
			t.Error("lease still live at the grantor after its TTL")
		}
		synctest.Wait()
		if calls := lost.get(); len(calls) != 0 {
			t.Errorf("OnLost called after Orphan: %+v", calls)
		}
	})
}

func TestKeeperOrphanDuringBlockedRenewal(t *testing.T) {
	// Orphan and Close must not wait for a renewal stuck on a silent grantor.
	for _, closeIt := range []bool{false, true} {
		name := "Orphan"
		if closeIt {
			name = "Close"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const d = 3 * time.Second
				g := kvleasetest.NewFakeGrantor()
				l := mustAcquire(t, g, "svc/web", d)
				k, lost := keepRecording(t, l)
				g.SetMode(kvleasetest.FakeUnreachable)
				time.Sleep(kvlease.DefaultRenewInterval(d) + 100*time.Millisecond)
				synctest.Wait()
				if n := len(g.Renewals()); n != 1 {
					t.Fatalf("%d renew calls in flight, want 1", n)
				}
				stopAt := time.Now()
				if closeIt {
					ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
					err := k.Close(ctx)
					cancel()
					if !errors.Is(err, kvlease.ErrUnavailable) {
						t.Errorf("Close with the grantor unreachable = %v, want ErrUnavailable", err)
					}
					if got := time.Since(stopAt); got != 200*time.Millisecond {
						t.Errorf("Close took %v, want its context's 200ms", got)
					}
					if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
						t.Errorf("Check after a failed Close = %v, want ErrExpired", err)
					}
				} else {
					k.Orphan()
					if got := time.Since(stopAt); got != 0 {
						t.Errorf("Orphan waited %v for the blocked renewal", got)
					}
				}
				if err := k.Err(); !errors.Is(err, kvlease.ErrClosed) {
					t.Errorf("Err() = %v, want ErrClosed", err)
				}
				if st := k.Stats(); st.Failures != 0 {
					t.Errorf("a renewal cut short by Orphan counted as a failure: %+v", st)
				}
				synctest.Wait()
				if calls := lost.get(); len(calls) != 0 {
					t.Errorf("OnLost called: %+v", calls)
				}
			})
		})
	}
}

func TestKeeperParentCancelReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		var lost lostRecorder
		ctx, cancel := context.WithCancel(t.Context())
		k, err := kvlease.Keep(ctx, l, kvlease.WithOnLost(lost.onLost))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(kvlease.DefaultRenewInterval(d) + time.Millisecond)
		cancel()
		<-k.Done()
		if err := k.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("Err() = %v, want context.Canceled", err)
		}
		if rel := g.Releases(); len(rel) != 1 {
			t.Errorf("grantor saw %d releases after the parent context ended, want 1", len(rel))
		}
		synctest.Wait()
		if calls := lost.get(); len(calls) != 0 {
			t.Errorf("OnLost called after parent cancel: %+v", calls)
		}
	})
}

// endsWithKeeper is a context that ends the moment a keeper's Context
// does: a holder whose deferred cancel of Keep's ctx runs as soon as
// k.Context() ends, without a scheduler in between.
type endsWithKeeper struct {
	context.Context
	k atomic.Pointer[kvlease.Keeper]
}

func (c *endsWithKeeper) Done() <-chan struct{} {
	if k := c.k.Load(); k != nil {
		return k.Context().Done()
	}
	return nil
}

func (c *endsWithKeeper) Err() error {
	if k := c.k.Load(); k != nil && k.Context().Err() != nil {
		return context.Canceled
	}
	return nil
}

// A loss is a loss even when Keep's ctx ends right after it: OnLost was
// skipped whenever ctx had ended by the time the keeper called it, so a
// holder that cancels ctx once Context ends (a deferred cancel) could miss
// the refusal it was told of nowhere else (found in review).
func TestKeeperLossReportedWhenContextEndsRightAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		var lost lostRecorder
		ctx := &endsWithKeeper{Context: t.Context()}
		k, err := kvlease.Keep(ctx, l, kvlease.WithOnLost(lost.onLost))
		if err != nil {
			t.Fatal(err)
		}
		ctx.k.Store(k)
		g.SetMode(kvleasetest.FakeRefuse)
		<-k.Done()
		synctest.Wait()
		if calls := lost.get(); len(calls) != 1 || !errors.Is(calls[0].err, kvlease.ErrNotHolder) {
			t.Errorf("OnLost calls = %+v, want one with ErrNotHolder", calls)
		}
	})
}

// The same when the refusal is to a caller of Lease.Renew while the
// keeper waits for its next renewal: watchDeadline ends Context, the
// holder's ctx ends with it, and the loop, finding both ended, took the
// ctx's half of the time for the holder's own end: it released and
// called no OnLost (found by an outside client: the test above failed 1
// run in 10 for the same race in the loop's renewal path).
func TestKeeperLossReportedWhenContextEndsRightAfterARefusalToRenew(t *testing.T) {
	for round := range 20 {
		synctest.Test(t, func(t *testing.T) {
			const d = 3 * time.Second
			g := kvleasetest.NewFakeGrantor()
			l := mustAcquire(t, g, "svc/web", d)
			var lost lostRecorder
			ctx := &endsWithKeeper{Context: t.Context()}
			k, err := kvlease.Keep(ctx, l, kvlease.WithOnLost(lost.onLost))
			if err != nil {
				t.Fatal(err)
			}
			ctx.k.Store(k)
			synctest.Wait() // the keeper waits for its next renewal
			g.SetMode(kvleasetest.FakeRefuse)
			if err := l.Renew(t.Context()); !errors.Is(err, kvlease.ErrNotHolder) {
				t.Fatalf("Renew: %v, want ErrNotHolder", err)
			}
			<-k.Done()
			synctest.Wait()
			if calls := lost.get(); len(calls) != 1 || !errors.Is(calls[0].err, kvlease.ErrNotHolder) {
				t.Errorf("round %d: OnLost calls = %+v, want one with ErrNotHolder", round, calls)
			}
			if err := k.Err(); !errors.Is(err, kvlease.ErrNotHolder) {
				t.Errorf("round %d: Err = %v, want ErrNotHolder", round, err)
			}
		})
	}
}

func TestLeaseCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		const margin = 300 * time.Millisecond
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "svc/web", d, kvlease.WithHolderMargin(margin))
		w := kvlease.HolderValidity(d, kvlease.DefaultClockRate, margin)
		if got := l.Deadline().Sub(start); got != w {
			t.Fatalf("deadline at %v, want %v", got, w)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("Check right after Acquire: %v", err)
		}

		time.Sleep(w - 500*time.Millisecond)
		if err := l.CheckFor(499 * time.Millisecond); err != nil {
			t.Errorf("CheckFor(499ms) with 500ms left: %v", err)
		}
		var le *kvlease.LeaseExpiredError
		for _, need := range []time.Duration{500 * time.Millisecond, 600 * time.Millisecond} {
			err := l.CheckFor(need)
			if !errors.As(err, &le) || !errors.Is(err, kvlease.ErrExpired) {
				t.Fatalf("CheckFor(%v) with 500ms left = %v, want *LeaseExpiredError", need, err)
			}
			if le.Remaining != 500*time.Millisecond || le.Need != need || le.Margin != margin || le.Token != l.Token() || le.Name != "svc/web" {
				t.Errorf("CheckFor(%v): %+v", need, *le)
			}
		}
		if n := l.LateEffects(); n != 0 {
			t.Errorf("LateEffects = %d before the deadline, want 0", n)
		}

		time.Sleep(500*time.Millisecond - time.Nanosecond)
		if err := l.Check(); err != nil {
			t.Errorf("Check 1ns before the deadline: %v", err)
		}
		time.Sleep(time.Nanosecond)
		if err := l.Check(); !errors.As(err, &le) || le.Remaining != 0 {
			t.Errorf("Check at the deadline = %v, want *LeaseExpiredError with 0 remaining", err)
		}
		time.Sleep(time.Second)
		if err := l.Check(); !errors.As(err, &le) || le.Remaining != -time.Second {
			t.Errorf("Check 1s after the deadline = %v, want *LeaseExpiredError with -1s remaining", err)
		}
		if err := l.CheckFor(time.Second); !errors.Is(err, kvlease.ErrExpired) {
			t.Errorf("CheckFor after the deadline = %v", err)
		}
		if n := l.LateEffects(); n != 3 {
			t.Errorf("LateEffects = %d, want 3 (checks at or after the deadline)", n)
		}
		// A renewal is never sent after the deadline.
		if err := l.Renew(t.Context()); !errors.As(err, &le) {
			t.Errorf("Renew after the deadline = %v, want *LeaseExpiredError", err)
		}
		if n := len(g.Renewals()); n != 0 {
			t.Errorf("Renew after the deadline reached the grantor (%d calls)", n)
		}
	})
}

func TestLeaseCheckRenewMovesDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "svc/web", d)
		w := kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
		time.Sleep(2 * time.Second)
		if err := l.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got, want := l.Deadline().Sub(start), 2*time.Second+w; got != want {
			t.Errorf("deadline after renewal at 2s = %v, want %v", got, want)
		}
		time.Sleep(w - time.Nanosecond)
		if err := l.Check(); err != nil {
			t.Errorf("Check just before the renewed deadline: %v", err)
		}
		// A renewal that blocks is abandoned at the deadline, not after, as
		// the lease's expiry: "unavailable" blamed the grantor for a holder
		// paused while its renewal was out (found by an outside client: a
		// SIGSTOPped run's renewal was counted a renewal failure
		// "unavailable", where the others' pauses counted "expired").
		g.SetMode(kvleasetest.FakeUnreachable)
		err := l.Renew(t.Context())
		var le *kvlease.LeaseExpiredError
		if !errors.As(err, &le) || le.Refused != nil || le.Remaining > 0 {
			t.Errorf("blocked Renew = %v, want a *LeaseExpiredError at the deadline", err)
		}
		if got, want := time.Since(start), 2*time.Second+w; got != want {
			t.Errorf("blocked Renew returned at %v, want the deadline %v", got, want)
		}
	})
}

// gatedRenewGrantor lets a renewal land at the grantor and then holds its
// reply until gate is closed: a reply in flight.
type gatedRenewGrantor struct {
	*kvleasetest.FakeGrantor
	gate chan struct{}
}

func (g gatedRenewGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	rec, err := g.FakeGrantor.Renew(ctx, req)
	<-g.gate
	return rec, err
}

func TestLeaseCheckReleaseDuringRenew(t *testing.T) {
	// Release says the lease is invalid from the moment it is called,
	// whatever it returns. A renewal whose reply arrives after that must not
	// bring the deadline back.
	synctest.Test(t, func(t *testing.T) {
		g := gatedRenewGrantor{kvleasetest.NewFakeGrantor(), make(chan struct{})}
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		time.Sleep(time.Second)
		renewed := make(chan error, 1)
		go func() { renewed <- l.Renew(t.Context()) }()
		synctest.Wait() // the renewal landed; its reply is held
		// The release names the revision before the renewal; told it is
		// stale, it names the current one, and the tenure ends at the
		// grantor too.
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("Release racing a renewal = %v, want it to name the current revision", err)
		}
		_, live := g.Lookup("svc/web")
		if live {
			t.Fatal("the lease is still live at the grantor after Release")
		}
		if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
			t.Fatalf("Check after Release = %v, want ErrExpired", err)
		}
		close(g.gate)
		if err := <-renewed; err != nil {
			t.Fatalf("Renew: %v", err)
		}
		if err := l.Check(); !errors.Is(err, kvlease.ErrExpired) {
			t.Errorf("Check after Release and a late renewal reply = %v, want ErrExpired", err)
		}
	})
}

func TestKeeperRejectsInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		w := kvlease.HolderValidity(d, kvlease.DefaultClockRate, kvlease.DefaultHolderMargin(d))
		for _, iv := range []time.Duration{w/2 + time.Nanosecond, w, d, 0, -time.Second} {
			k, err := kvlease.Keep(t.Context(), l, kvlease.WithRenewInterval(iv))
			if !errors.Is(err, kvlease.ErrInvalidTiming) || k != nil {
				t.Errorf("Keep with interval %v = (%v, %v), want ErrInvalidTiming", iv, k, err)
			}
		}
		// Half the window is the largest interval allowed.
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithRenewInterval(w/2))
		if err != nil {
			t.Fatalf("Keep with interval w/2: %v", err)
		}
		k.Orphan()
		// Nothing was started by the failed Keeps: synctest.Test fails on
		// goroutines left in the bubble.
	})
}

func TestKeeperAcquireRejectsMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		_, err := kvlease.Acquire(t.Context(), g, "svc/web", "holder-1", time.Second, kvlease.WithHolderMargin(time.Second))
		if !errors.Is(err, kvlease.ErrInvalidTiming) {
			t.Fatalf("Acquire with margin = D: %v, want ErrInvalidTiming", err)
		}
		if g.Grants() != 0 {
			t.Errorf("Acquire with invalid timing sent %d grants", g.Grants())
		}
	})
}

func TestKeeperCloseAfterOrphanKeepsHandover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		k, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		k.Orphan()
		if err := k.Close(t.Context()); err != nil {
			t.Fatalf("Close after Orphan: %v", err)
		}
		if rel := g.Releases(); len(rel) != 0 {
			t.Fatalf("Close after Orphan released: %+v", rel)
		}
	})
}

func TestKeeperCloseTwiceReleasesOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		k, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := k.Close(t.Context()); err != nil {
				t.Fatalf("Close: %v", err)
			}
		}
		if rel := g.Releases(); len(rel) != 1 {
			t.Fatalf("%d releases, want 1", len(rel))
		}
		err = l.Check()
		var exp *kvlease.LeaseExpiredError
		if !errors.As(err, &exp) || !exp.Released || !strings.Contains(err.Error(), "released") {
			t.Fatalf("Check after Close: %v, want a released LeaseExpiredError", err)
		}
	})
}

// The first renewal is due an interval after the lease's t0, even if the
// holder keeps it late.
func TestKeeperFirstRenewalFromLeaseStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		start := time.Now()
		l := mustAcquire(t, g, "late", d)
		time.Sleep(d / 2) // work before keeping: past the first renewal point
		k, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		defer k.Orphan()
		synctest.Wait()
		calls := g.Renewals()
		if len(calls) == 0 || calls[0].At.Sub(start) != d/2 {
			t.Fatalf("renewals %+v: want the first at once (%v after the grant), since one was overdue", calls, d/2)
		}
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// A lease whose clock guard reports the rate error beyond ρ is not safely
// held, whatever its deadline says.
func TestLeaseCheckClockGuard(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		drifting := false
		l := mustAcquire(t, g, "clock", 3*time.Second, kvlease.WithClockGuard(func(rho float64) bool {
			return drifting && rho == kvlease.DefaultClockRate
		}))
		if err := l.Check(); err != nil {
			t.Fatal(err)
		}
		drifting = true
		err := l.Check()
		if !errors.Is(err, kvlease.ErrExpired) || !errors.Is(err, kvlease.ErrClockRate) {
			t.Fatalf("check with drifting clocks: %v", err)
		}
	})
}

// Close while a renewal is in flight: the renewal is let finish, so that the
// release names the revision the renewal moved the lease to (cut short, the
// release would name a stale revision and be refused).
func TestKeeperCloseDuringRenewalReleasesNewRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := ctxGatedGrantor{kvleasetest.NewFakeGrantor(), make(chan struct{})}
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		k, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(kvlease.DefaultRenewInterval(3*time.Second) + time.Millisecond) // the renewal is applied, its reply held
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- k.Close(context.Background()) }()
		synctest.Wait()
		close(g.gate) // the reply arrives
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		rel := g.Releases()
		cur, _ := g.Lookup("svc/web")
		if len(rel) != 1 || cur.Revision != 0 && rel[0].Revision != cur.Revision {
			t.Fatalf("released %+v; lease now %+v", rel, cur)
		}
		if _, live := g.Lookup("svc/web"); live {
			t.Fatal("the lease is still live after Close")
		}
	})
}

// ctxGatedGrantor applies a renewal at once but holds its reply until gate
// is closed, giving up when ctx ends, as a NATS request does: the caller
// then cannot know the renewal happened.
type ctxGatedGrantor struct {
	*kvleasetest.FakeGrantor
	gate chan struct{}
}

func (g ctxGatedGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	rec, err := g.FakeGrantor.Renew(ctx, req)
	select {
	case <-g.gate:
		return rec, err
	case <-ctx.Done():
		return kvlease.Record{}, fmt.Errorf("%w: %w", kvlease.ErrUnavailable, ctx.Err())
	}
}

// Context ends at the holder's deadline even while the keeper's goroutine
// is busy: here an OnRenew callback that runs far past the deadline.
func TestKeeperContextEndsAtDeadlineDuringSlowCallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		release := make(chan struct{})
		k, err := kvlease.Keep(t.Context(), l, kvlease.WithOnRenew(func(kvlease.Record, time.Time) {
			select { // the first renewal's callback hangs until the test lets it go
			case <-release:
			case <-time.After(10 * d):
			}
		}))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(kvlease.DefaultRenewInterval(d) + time.Millisecond) // renewed; the callback is stuck
		synctest.Wait()
		deadline := l.Deadline()
		if k.Context().Err() != nil {
			t.Fatal("context ended before the deadline")
		}
		time.Sleep(time.Until(deadline))
		synctest.Wait()
		var expired *kvlease.LeaseExpiredError
		if err := context.Cause(k.Context()); !errors.As(err, &expired) {
			t.Fatalf("at the deadline, while the callback runs: context cause %v, want a LeaseExpiredError", err)
		}
		if err := k.Err(); !errors.As(err, &expired) { // it was nil until the loop ended
			t.Fatalf("at the deadline, while the callback runs: Err() = %v, want the LeaseExpiredError too", err)
		}
		close(release)
		<-k.Done()
	})
}

// Renewals of one lease from two goroutines (say the keeper and the
// program) take turns: the second names the revision the first produced
// instead of finding its own stale.
func TestLeaseConcurrentRenewsTakeTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := gatedRenewGrantor{kvleasetest.NewFakeGrantor(), make(chan struct{})}
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		errs := make(chan error, 2)
		go func() { errs <- l.Renew(t.Context()) }()
		synctest.Wait() // the first renewal is stored, its reply held
		go func() { errs <- l.Renew(t.Context()) }()
		synctest.Wait()
		close(g.gate)
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent renew: %v", err)
			}
		}
		if n := len(g.Renewals()); n != 2 {
			t.Fatalf("%d renew calls, want 2", n)
		}
	})
}

// Release while a lost reply is being recovered: no renewal goes out after
// Release, and the release names the revision the lost renewal stored.
func TestLeaseReleaseAfterLostReplySendsNoRenewal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", 3*time.Second)
		g.SetMode(kvleasetest.FakeLoseReply)
		if err := l.Renew(t.Context()); !errors.Is(err, kvlease.ErrUnavailable) {
			t.Fatalf("renew with its reply lost: %v", err)
		}
		g.SetMode(kvleasetest.FakeOK)
		before := len(g.Renewals())
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("release naming a revision one behind: %v", err)
		}
		if err := l.Renew(t.Context()); !errors.Is(err, kvlease.ErrNotFound) {
			t.Fatalf("renew after release: %v, want ErrNotFound", err)
		}
		if n := len(g.Renewals()); n != before {
			t.Fatalf("%d renewals sent after Release", n-before)
		}
		_, live := g.Lookup("svc/web")
		if live {
			t.Fatal("the lease is still live at the grantor after Release")
		}
	})
}

// A clock guard that trips ends a kept tenure, as it fails Check: the
// keeper stops renewing and ends its Context (and `leased run`, which
// waits on Done, stops its command). It kept renewing, Context live, for
// as long as the grantor answered.
func TestKeeperEndsWhenTheClockGuardTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		var drifting atomic.Bool
		const d = 3 * time.Second
		l := mustAcquire(t, g, "clock", d, kvlease.WithClockGuard(func(float64) bool { return drifting.Load() }))
		k, lost := keepRecording(t, l)
		defer k.Close(context.Background())
		time.Sleep(d / 2)
		drifting.Store(true)
		tripped := time.Now()
		if err := l.Check(); !errors.Is(err, kvlease.ErrClockRate) {
			t.Fatalf("Check with the guard tripped: %v, want ErrClockRate", err)
		}
		time.Sleep(d / 3) // the keeper's interval
		synctest.Wait()
		if !isClosed(k.Done()) {
			t.Fatalf("the keeper still runs %v after the clock guard tripped", time.Since(tripped))
		}
		renewals := len(g.Renewals())
		if calls := lost.get(); len(calls) != 1 || !errors.Is(calls[0].err, kvlease.ErrClockRate) {
			t.Errorf("OnLost: %v, want one call with ErrClockRate", calls)
		}
		if err := context.Cause(k.Context()); !errors.Is(err, kvlease.ErrClockRate) {
			t.Errorf("the keeper's Context ended with %v, want ErrClockRate", err)
		}
		time.Sleep(3 * d)
		if n := len(g.Renewals()); n != renewals {
			t.Errorf("%d renewals sent after the keeper ended", n-renewals)
		}
	})
}

// shortGrantor grants a third of what is asked.
type shortGrantor struct{ *kvleasetest.FakeGrantor }

func (g shortGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	req.Duration /= 3
	return g.FakeGrantor.Grant(ctx, req)
}

func (g shortGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	req.Duration /= 3
	return g.FakeGrantor.Renew(ctx, req)
}

// A grantor that grants less than asked is trusted (the deadline counts
// what was granted), and so is the keeper's interval: it renews every
// third of the granted duration. It renewed every third of the duration
// asked, and the lease lapsed at the holder before its first renewal.
func TestKeeperRenewsWhatWasGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := shortGrantor{kvleasetest.NewFakeGrantor()}
		const d = 9 * time.Second
		l := mustAcquire(t, g, "short", d)
		k, lost := keepRecording(t, l)
		defer k.Close(context.Background())
		time.Sleep(3 * d)
		synctest.Wait()
		if calls := lost.get(); len(calls) > 0 {
			t.Fatalf("lost with the grantor answering every request: %v (renewals: %d)", calls[0].err, len(g.Renewals()))
		}
		if n := len(g.Renewals()); n < 24 { // 27 s at one renewal a second (D/3 of the 3 s granted)
			t.Errorf("%d renewals in 27 s of a lease granted for 3 s, want about 27", n)
		}
	})
}

// A grant too short for the holder's margin is given back, and Acquire
// says so: it returned a lease that had already expired, and no error.
func TestAcquireRefusesAGrantTooShortToHold(t *testing.T) {
	g := shortGrantor{kvleasetest.NewFakeGrantor()}
	_, err := kvlease.Acquire(t.Context(), g, "tiny", "h", 3*time.Second, kvlease.WithHolderMargin(1500*time.Millisecond))
	if !errors.Is(err, kvlease.ErrInvalidTiming) {
		t.Errorf("Acquire granted 1 s with a 1.5 s margin: %v, want ErrInvalidTiming", err)
	}
	if _, ok := g.Lookup("tiny"); ok {
		t.Error("the grant too short to hold was not released")
	}
}

// A kept lease released directly (not through Keeper.Close) ends the
// keeper at once, as Close would: Context and Done end, no renewal is
// sent, and OnLost is not called (nothing was lost). Context ended only at
// the next renewal attempt, which reported a loss.
func TestKeeperEndsWhenItsLeaseIsReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "rel", 3*time.Second)
		k, lost := keepRecording(t, l)
		defer k.Close(context.Background())
		time.Sleep(100 * time.Millisecond)
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // no time passes
		if !isClosed(k.Done()) || !errors.Is(context.Cause(k.Context()), kvlease.ErrClosed) {
			t.Fatalf("right after Release: Done closed %v, Context's cause %v", isClosed(k.Done()), context.Cause(k.Context()))
		}
		if calls := lost.get(); len(calls) > 0 {
			t.Errorf("OnLost after the holder released: %v", calls)
		}
		if n := len(g.Renewals()); n > 0 {
			t.Errorf("%d renewals sent", n)
		}
	})
}

// A kept lease whose renewal is refused to a caller of Lease.Renew (not
// the keeper: a leader's own code, say, through Leadership.Lease) ends
// the keeper at once, as a refusal to the keeper does: the lease is gone
// (Check fails from then on), and Context stayed live until watchDeadline
// next looked, a second later on Linux and at the old deadline elsewhere
// (found in review).
func TestKeeperEndsWhenARenewalOfItsLeaseIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "refused", 3*time.Second)
		k, lost := keepRecording(t, l)
		defer k.Close(context.Background())
		time.Sleep(100 * time.Millisecond)
		g.SetMode(kvleasetest.FakeRefuse)
		if err := l.Renew(context.Background()); !errors.Is(err, kvlease.ErrNotHolder) {
			t.Fatalf("Renew: %v, want ErrNotHolder", err)
		}
		synctest.Wait() // no time passes
		if !isClosed(k.Done()) || !errors.Is(context.Cause(k.Context()), kvlease.ErrNotHolder) {
			t.Fatalf("right after the refusal: Done closed %v, Context's cause %v; want ended by the refusal",
				isClosed(k.Done()), context.Cause(k.Context()))
		}
		if calls := lost.get(); len(calls) != 1 || !errors.Is(calls[0].err, kvlease.ErrNotHolder) {
			t.Errorf("OnLost calls %v, want one, for the refusal", calls)
		}
	})
}

// A release the grantor does not answer (a failover) is sent again until
// it is answered, within the caller's context and the lease's duration:
// one attempt left the lease taken for a TTL (found by an outside client).
func TestReleaseRetriesAnUnansweredRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		const d = 10 * time.Second
		l, err := kvlease.Acquire(t.Context(), g, "rel", "h", d)
		if err != nil {
			t.Fatal(err)
		}
		g.SetMode(kvleasetest.FakeFailFast)
		done := make(chan error, 1)
		go func() { done <- l.Release(t.Context()) }()
		time.Sleep(3 * time.Second) // the grantor is away for 3 s
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("release returned while the grantor was away: %v", err)
		default:
		}
		g.SetMode(kvleasetest.FakeOK)
		if err := <-done; err != nil {
			t.Fatalf("release once the grantor is back: %v", err)
		}
		if _, held := g.Lookup("rel"); held {
			t.Fatal("the lease is still held after its release")
		}

		// With the grantor away for good, it gives up after the lease's
		// duration (the lease lapses by itself then), or when ctx ends.
		l, err = kvlease.Acquire(t.Context(), g, "rel", "h", d)
		if err != nil {
			t.Fatal(err)
		}
		g.SetMode(kvleasetest.FakeFailFast)
		start := time.Now()
		if err := l.Release(t.Context()); !errors.Is(err, kvlease.ErrUnavailable) || time.Since(start) > d+time.Second {
			t.Fatalf("release to a grantor away for good: %v after %v, want ErrUnavailable after about %v", err, time.Since(start), d)
		}
	})
}

// A grant answered only after the holder's deadline (counted, as always,
// from the first attempt's send: a grantor unreachable meanwhile, a
// cluster without quorum) leaves the holder nothing: Acquire gives it back
// and asks anew, as it did for a recovered one. It returned the lease
// already expired, with no error, and the caller's Close released nothing
// (found by an outside client: 6 leases held by no one for their TTL
// across quorum losses).
func TestAcquireAnsweredAfterItsDeadlineAsksAnew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		g.SetMode(kvleasetest.FakeUnreachable)
		go func() {
			time.Sleep(5 * time.Second) // past the 2 s lease's validity
			g.SetMode(kvleasetest.FakeOK)
		}()
		l, err := kvlease.Acquire(t.Context(), g, "doa", "h", 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Check(); err != nil {
			t.Fatalf("Acquire returned a lease past its deadline: %v", err)
		}
		if rel := g.Releases(); g.Grants() != 2 || len(rel) != 1 || rel[0].Token == l.Token() {
			t.Fatalf("%d grants, releases %+v; want the late tenure given back and a new one (token %d)", g.Grants(), rel, l.Token())
		}
	})
}

// slowGrantor answers every grant after delay.
type slowGrantor struct {
	*kvleasetest.FakeGrantor
	delay time.Duration
}

func (g slowGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	time.Sleep(g.delay)
	return g.FakeGrantor.Grant(ctx, req)
}

// A grantor that answers every grant after the holder's deadline makes
// Acquire give up after a few (ErrUnavailable), each given back, rather
// than grant and release for as long as its ctx lasts.
func TestAcquireGivesUpOnAGrantorSlowerThanTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := slowGrantor{kvleasetest.NewFakeGrantor(), 3 * time.Second}
		_, err := kvlease.Acquire(context.Background(), g, "slow", "h", 2*time.Second)
		if !errors.Is(err, kvlease.ErrUnavailable) || !strings.Contains(err.Error(), "after the holder's deadline") {
			t.Fatalf("Acquire from a grantor slower than the lease: %v; want ErrUnavailable saying so", err)
		}
		if n, rel := g.Grants(), len(g.Releases()); n != 3 || rel != 3 {
			t.Fatalf("%d grants and %d releases; want each of the 3 late grants given back", n, rel)
		}
	})
}

// lateAnswerGrantor answers its first grant after delay, and refuses to answer
// releases until unreachableUntil; a release takes a round trip and is not
// sent on an ended ctx, as over NATS.
type lateAnswerGrantor struct {
	*kvleasetest.FakeGrantor
	delay            time.Duration
	unreachableUntil time.Time
	notSentFrom      int // from this grant on (0: never), none is sent for notSentFor
	notSentFor       time.Duration
	notSentUntil     *time.Time
	grants           *atomic.Int32
}

func (g lateAnswerGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	n := g.grants.Add(1)
	if n == 1 {
		time.Sleep(g.delay)
	}
	if g.notSentFrom > 0 && int(n) >= g.notSentFrom {
		if g.notSentUntil.IsZero() {
			*g.notSentUntil = time.Now().Add(g.notSentFor)
		}
		if time.Now().Before(*g.notSentUntil) {
			return kvlease.Record{}, fmt.Errorf("%w: not connected", kvlease.ErrNotSent)
		}
	}
	return g.FakeGrantor.Grant(ctx, req)
}

func (g lateAnswerGrantor) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	time.Sleep(5 * time.Millisecond)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", kvlease.ErrUnavailable, err)
	}
	if time.Now().Before(g.unreachableUntil) {
		return fmt.Errorf("%w: release: no answer", kvlease.ErrUnavailable)
	}
	return g.FakeGrantor.Release(ctx, req)
}

// A grant answered after the holder's deadline is given back even when
// the caller's ctx ends during the release, or the release goes unanswered
// for a while: it was sent once on the caller's ctx, and the tenure was
// left held by no one for its TTL, and refused the next attempt (found in
// review).
func TestAcquireGivesBackALateGrantWhateverItsRelease(t *testing.T) {
	for _, c := range []struct {
		name        string
		ctx         time.Duration // the caller's; 0 for none
		unreachable time.Duration // releases unanswered for this long after the late answer
		notSentFrom int
		notSentFor  time.Duration
		maxGrants   int32
		wantErr     bool
	}{
		{name: "ctx ends during the release", ctx: 3*time.Second + 2*time.Millisecond, wantErr: true},
		{name: "release unanswered once", unreachable: 10 * time.Millisecond},
		{name: "release unanswered past its budget", unreachable: 1500 * time.Millisecond},
		// Then nothing can be sent for 5 s: retried with backoff, not in
		// a loop (the wait after clearing the orphan was 0, and stayed 0;
		// found in review).
		{name: "then not connected", unreachable: 1500 * time.Millisecond, notSentFrom: 3, notSentFor: 5 * time.Second, maxGrants: 30},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := lateAnswerGrantor{FakeGrantor: kvleasetest.NewFakeGrantor(), delay: 3 * time.Second, grants: new(atomic.Int32),
					notSentFrom: c.notSentFrom, notSentFor: c.notSentFor, notSentUntil: new(time.Time)}
				g.unreachableUntil = time.Now().Add(g.delay + c.unreachable)
				ctx := context.Background()
				if c.ctx > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.ctx)
					defer cancel()
				}
				l, err := kvlease.Acquire(ctx, g, "late", "h", 2*time.Second)
				if (err != nil) != c.wantErr {
					t.Fatalf("Acquire: %v; want an error: %t", err, c.wantErr)
				}
				rec, held := g.Lookup("late")
				switch {
				case err != nil && held:
					t.Fatalf("Acquire failed (%v), and the lease is held by %q (token %d) for %v more: no one holds it",
						err, rec.Holder, rec.Token, time.Until(rec.ExpiresAt()))
				case err == nil && (!held || rec.Token != l.Token()):
					t.Fatalf("Acquire granted token %d; the grantor has %+v (held: %t)", l.Token(), rec, held)
				case err == nil && l.Token() == 1:
					t.Fatalf("Acquire returned the late tenure (token 1)")
				}
				if n := g.grants.Load(); c.maxGrants > 0 && n > c.maxGrants {
					t.Errorf("%d grant attempts; want at most %d (backoff)", n, c.maxGrants)
				}
			})
		})
	}
}

// A keeper that lost its lease while its renewals went unanswered, though
// carried out (a stalled server that resumes carries out what it was
// sent), releases on Close: the tenure such a renewal brought back stayed
// live for a whole TTL with no holder, and the next candidate waited
// (found by an outside client: elect's leases held 10 s more after a
// serve's SIGSTOP).
func TestKeeperCloseAfterALossReleasesWhatALateRenewalBroughtBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "late.renewal", d)
		g.SetMode(kvleasetest.FakeLoseReply)
		k, err := kvlease.Keep(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		<-k.Done()
		if errors.Is(k.Err(), kvlease.ErrClosed) {
			t.Fatalf("keeper ended with %v; want a loss", k.Err())
		}
		if _, ok := g.Lookup("late.renewal"); !ok {
			t.Fatal("no renewal was carried out: nothing to test")
		}
		g.SetMode(kvleasetest.FakeOK)
		if err := k.Close(context.Background()); err != nil {
			t.Fatalf("Close after the loss (%v): %v", k.Err(), err)
		}
		if rec, ok := g.Lookup("late.renewal"); ok {
			t.Fatalf("after Close the lost tenure is still live (%+v), with no holder", rec)
		}
	})
}

// After a loss, Close's release is bounded by closeGrace whatever ctx
// allows, and Close returns nil: a defer'd Close after a paused server's
// loss blocked for the lease's whole duration (30 s here) and returned
// ErrUnavailable (found in review).
func TestKeeperCloseAfterALossIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "paused", 30*time.Second)
		g.SetMode(kvleasetest.FakeUnreachable)
		k, err := kvlease.Keep(context.Background(), l)
		if err != nil {
			t.Fatal(err)
		}
		<-k.Done()
		start := time.Now()
		if err := k.Close(context.Background()); err != nil {
			t.Errorf("Close after the loss (%v): %v; want nil", k.Err(), err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Close after the loss took %v; want at most about 2 s", took)
		}
	})
}

// Orphan never releases, even when the keeper's ctx ends at the same
// moment: the loop, finding both its stop and its ctx's end, took the ctx
// half of the time and released, though Orphan had already been called.
// It ends as Orphan alone ends it (ErrClosed, no OnLost).
func TestKeeperOrphanAsCtxEndsDoesNotRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 3 * time.Second
		g := kvleasetest.NewFakeGrantor()
		for i := range 20 {
			l := mustAcquire(t, g, fmt.Sprintf("svc/%d", i), d)
			ctx, cancel := context.WithCancel(t.Context())
			entered, proceed := make(chan struct{}), make(chan struct{})
			var once sync.Once
			var lost atomic.Bool
			k, err := kvlease.Keep(ctx, l, kvlease.WithOnRenew(func(kvlease.Record, time.Time) {
				once.Do(func() { close(entered); <-proceed })
			}), kvlease.WithOnLost(func(error) { lost.Store(true) }))
			if err != nil {
				t.Fatal(err)
			}
			<-entered // the loop is in the first renewal's callback
			cancel()
			go k.Orphan()
			synctest.Wait() // Orphan has stopped the loop and waits for it
			close(proceed)
			<-k.Done()
			synctest.Wait()
			if rel := g.Releases(); len(rel) != 0 {
				t.Fatalf("round %d: Orphan as ctx ended released: %+v", i, rel)
			}
			if err := k.Err(); !errors.Is(err, kvlease.ErrClosed) || lost.Load() {
				t.Fatalf("round %d: Err() = %v, OnLost called %v; want ErrClosed, as after Orphan alone, and no OnLost", i, err, lost.Load())
			}
		}
	})
}

// One Keeper keeps a lease at a time: a second Keep while the first runs
// is refused (two renewed it twice as often, and the first's Close
// released it under the second), and once the first has orphaned the
// lease another may keep it, its renewals going on.
func TestKeepRefusesASecondKeeper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 30 * time.Second
		g := kvleasetest.NewFakeGrantor()
		l := mustAcquire(t, g, "svc/web", d)
		first, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		if k, err := kvlease.Keep(t.Context(), l); !errors.Is(err, kvlease.ErrInvalidOption) {
			if k != nil {
				_ = k.Close(t.Context())
			}
			t.Fatalf("a second Keep of a kept lease: %v, want ErrInvalidOption", err)
		}
		first.Orphan()
		second, err := kvlease.Keep(t.Context(), l)
		if err != nil {
			t.Fatalf("Keep after the first keeper orphaned the lease: %v", err)
		}
		defer func() { _ = second.Close(t.Context()) }()
		time.Sleep(d/3 + time.Second)
		synctest.Wait()
		if n := len(g.Renewals()); n != 1 {
			t.Fatalf("%d renewals by the second keeper in its first interval, want 1", n)
		}
	})
}
