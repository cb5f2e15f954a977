package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/kvlease"
)

// Election is leader election on one lease: the candidate that holds the
// lease leads, with the lease's token as its fencing token. Candidates wait
// on the bucket's stream for the leader's release, revocation or expiry
// marker and try at once: nothing polls, and a resignation hands over in one
// round trip.
type Election struct {
	store *kvlease.Store
	name  string
}

// New returns the election named name (a lease name) on store.
func New(store *kvlease.Store, name string) (*Election, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", kvlease.ErrInvalidOption)
	}
	if err := kvlease.ValidateName(name); err != nil {
		return nil, err
	}
	return &Election{store: store, name: name}, nil
}

// Name returns the election's lease name.
func (e *Election) Name() string { return e.name }

// Leadership is a won election: a kept lease. Its Context is cancelled the
// moment leadership is lost; Token fences the leader's writes.
type Leadership struct {
	*kvlease.Keeper
}

// Token returns the leadership's fencing token.
func (l *Leadership) Token() kvlease.Token { return l.Lease().Token() }

// Resign gives leadership up: it releases the lease, and the candidates
// waiting see the release at once. As [kvlease.Keeper.Close], under a ctx
// already done (defer lead.Resign(ctx) at shutdown) it still sends the
// release, for a moment.
func (l *Leadership) Resign(ctx context.Context) error { return l.Close(ctx) }

// Campaign blocks until candidate leads, or ctx ends. It tries to take the
// lease for duration d; while someone else leads it waits for the end of
// that tenure on the bucket's stream, then tries again. [kvlease.WithLease]
// configures the lease (a holder margin, a clock guard), [kvlease.WithKeeper] the
// keeper that renews it (WithOnLost, …).
//
// ctx bounds the campaign only: once won, leadership lasts until Resign,
// Orphan or its loss, whatever becomes of ctx. A leader keeps watching the
// lease on the bucket's stream: the end of its tenure (a revocation) or a
// newer tenure makes its keeper renew at once, and the refusal ends
// leadership then, not at the next renewal ([kvlease.WithRenewNow]); so
// does the watch's cut-off, and every second until it is back.
//
// Errors: ctx's; [kvlease.ErrInvalidOption]; validation errors
// ([kvlease.ErrInvalidHolder], [kvlease.ErrDurationOutOfRange],
// [kvlease.ErrInvalidTiming]), before anything is sent;
// [kvlease.ErrUnavailable] only if it persists (a candidate retries
// transient failures while ctx allows).
func (e *Election) Campaign(ctx context.Context, candidate string, d time.Duration, opts ...kvlease.HoldOption) (*Leadership, error) {
	o, err := kvlease.NewHold(opts...)
	if err != nil {
		return nil, err
	}
	if err := o.Check(d); err != nil { // not after waiting for, and winning, the lease
		return nil, err
	}
	// Refused now, as Claim does, not by the grant: with the server silent
	// the campaign waited for it, then returned ctx's error, never naming
	// the bad input (found by an outside client).
	if err := errors.Join(kvlease.ValidateHolder(candidate), e.store.CheckDuration(d)); err != nil {
		return nil, err
	}
	// The watch outlives ctx when the campaign is won: it then tells the
	// keeper of the leadership's end (see watchEnd).
	// A candidate started while JetStream has no quorum waits for it, as
	// one already waiting does (it exited at once; found by an outside client).
	var unwatch context.CancelFunc
	w, err := kvlease.RetryUnavailable(ctx, time.Second, o.OnUnavailable, func() (w *kvlease.Watcher, err error) {
		w, unwatch, err = e.watch(ctx)
		return w, err
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	won := false
	defer func() {
		if won {
			return
		}
		if ctx.Err() != nil {
			// Not waited for: stopping the watch deletes its consumer,
			// which waits up to a second for a server that may be silent
			// (a 1.5 s campaign against a serve SIGSTOPped 0.5 s in
			// returned after 2.5 s; found by an outside client).
			go func() {
				unwatch()
				w.Stop()
			}()
			return
		}
		w.Stop()
		unwatch()
	}()
	var lapse lapseTimer // the held tenure's end, if its event never comes
	defer lapse.clear()
	leaseOpts := o.Lease
	if o.OnUnavailable != nil {
		// Acquire sends an unanswered grant again until ctx ends, and
		// returns only then: OnUnavailable, called only by the retry
		// below, was never called for a grantor that fell silent while
		// this candidate waited (found by an outside client).
		leaseOpts = append(leaseOpts[:len(leaseOpts):len(leaseOpts)], kvlease.WithOnGrantRetry(o.OnUnavailable))
	}
	for {
		// While the server does not answer, try again shortly.
		l, err := kvlease.RetryUnavailable(ctx, time.Second, o.OnUnavailable, func() (*kvlease.Lease, error) {
			return kvlease.Acquire(ctx, e.store, e.name, candidate, d, leaseOpts...)
		})
		switch {
		case err == nil:
			now := make(chan struct{}, 1)
			k, err := kvlease.Keep(context.WithoutCancel(ctx), l, append(o.Keeper, kvlease.WithRenewNow(now))...)
			if err != nil {
				_ = l.Release(context.WithoutCancel(ctx))
				return nil, err
			}
			won = true
			go func() {
				defer unwatch()
				e.watchEnd(w, k, now)
			}()
			return &Leadership{k}, nil
		case errors.Is(err, kvlease.ErrHeld):
			// A revoked leader holds the lease until its deadline has
			// passed, or until it releases (EventFreed); no event says
			// when the hold ends: the refusal does.
			var held *kvlease.HeldError
			var heldBack time.Duration
			var token kvlease.Token
			if errors.As(err, &held) {
				heldBack, token = held.HeldBack, held.Token
			}
			if heldBack == 0 && (token == 0 || token != lapse.token) {
				// No event has shown the tenure that refused the grant
				// yet: the watch's replay of it may still be on its way,
				// or have been cut off with the connection before it
				// came; then, if the lease and its marker lapse before
				// the watch resumes, no event ever comes (the campaign
				// waited for good, the election vacant: 1 run in 12 of
				// TestCampaignWinsALapseMissedInAPartition). Until one
				// does, and saw arms the lapse from the tenure's TTL, the
				// grant is tried again every lapseRecheck.
				lapse.retry()
			}
			if err := e.waitVacant(ctx, w, heldBack, &lapse); err != nil {
				return nil, err
			}
		case errors.Is(err, kvlease.ErrUnavailable) && ctx.Err() != nil:
			return nil, ctx.Err() // ctx ended while the server did not answer
		default:
			return nil, err
		}
	}
}

// watch starts the campaign's watch of the lease. ctx bounds its start
// only: the watch's first read of the bucket waited up to 2 s for a server
// that did not answer, past a shorter ctx (found by an outside client), and
// once started the watch outlives ctx, until unwatch (after Stop).
func (e *Election) watch(ctx context.Context) (w *kvlease.Watcher, unwatch context.CancelFunc, err error) {
	wctx, unwatch := context.WithCancel(context.WithoutCancel(ctx))
	detach := context.AfterFunc(ctx, unwatch)
	w, err = e.store.Watch(wctx, e.name, kvlease.ExactName(), kvlease.ReportFrees())
	if !detach() { // ctx ended while the watch started: it was cut short
		if err == nil {
			w.Stop()
			err = ctx.Err()
		}
	}
	if err != nil {
		unwatch()
		return nil, nil, err
	}
	return w, unwatch, nil
}

// watchEnd hints k to renew at once (now) when w shows the end of k's
// tenure, or a newer tenure: a revoked leader learns of it at once instead
// of at its next renewal, and its Context ends then. It stops w when k is
// done.
//
// While w is interrupted ([kvlease.Watcher.Interrupts]) it shows nothing,
// for seconds if the cluster's meta leader died with its consumer: k is
// hinted as the interruption begins and every interruptedRecheck until
// the watch is back, as a waiting candidate tries its grant, while the
// connection is up: a renewal is not sent on one that is down, and would
// only fail. A leader whose watch had lost its consumer heard of a
// revocation with FreeNow only at its next renewal, 12 s after it with a
// 1 m lease (found by an outside client). A watch that follows costs
// nothing more.
func (e *Election) watchEnd(w *kvlease.Watcher, k *kvlease.Keeper, now chan<- struct{}) {
	defer w.Stop()
	token := k.Lease().Token()
	hint := func() {
		select {
		case now <- struct{}{}:
		default:
		}
	}
	nc := e.store.JetStream().Conn()
	interruptHint := func() {
		if nc.IsConnected() {
			hint()
		}
	}
	recheck := time.NewTimer(interruptedRecheck)
	recheck.Stop()
	defer recheck.Stop()
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return // the watch failed: the loss is found at the next renewal
			}
			if ev.Name == e.name && ev.Type.EndsTenure(ev.Token, token) {
				hint()
			}
		case <-w.Interrupts():
			interruptHint()
			recheck.Reset(interruptedRecheck)
		case <-recheck.C:
			if w.Interrupted() {
				interruptHint()
				recheck.Reset(interruptedRecheck)
			}
		case <-k.Done():
			return
		}
	}
}

// waitVacant waits for an event that ends a tenure of the election's lease
// or frees it after a revocation, or (heldBack > 0) for a revocation's
// hold to end, or for lapse: the server TTL (and lapseSlack) from when the
// held tenure was last seen granted or renewed, when its end should have
// been seen. That end may never come: a candidate cut off from the server
// while the lease lapsed, until its expiry marker had lapsed too (the
// bucket's marker TTL), resumes its watch after the last message it had,
// and nothing in the stream says the tenure ended (it waited for good, the
// election vacant; found in review). Then the grant is tried again, every
// lapseRecheck while it is refused; so it is while no event has shown the
// tenure that refused it (Campaign arms lapse so).
// It does not consult Synced: the replay reports live tenures only, never
// ends. The watcher began before the first grant attempt, so the tenure
// that refused the grant was live after the watch began, and its end is
// delivered as a live event even if it came before this call (it waits in
// the watcher's buffer). An end of an earlier tenure may be waiting there
// too; it costs one more attempt. A watcher that falls behind may see the
// next grant instead of an end (the bucket keeps one message per lease):
// the lease is held again then, and waiting for that tenure's end is right.
//
// While the watch is interrupted (it lost its consumer, and makes another:
// [kvlease.Watcher.Interrupts]) it hears of no end, for seconds if the
// cluster's meta leader died with it; the grant is tried again as the
// interruption begins and every interruptedRecheck until the watch is
// back. A candidate connected to a node that was killed (the meta
// leader) as the leader resigned took over 6–9 s after the release,
// when its new consumer was made (found by an outside client).
func (e *Election) waitVacant(ctx context.Context, w *kvlease.Watcher, heldBack time.Duration, lapse *lapseTimer) error {
	var free <-chan time.Time
	if heldBack > 0 {
		t := time.NewTimer(heldBack)
		defer t.Stop()
		free = t.C
	}
	var recheck <-chan time.Time
	if w.Interrupted() {
		t := time.NewTimer(interruptedRecheck)
		defer t.Stop()
		recheck = t.C
	}
	for {
		select {
		case <-free:
			return nil
		case <-w.Interrupts():
			return nil
		case <-recheck:
			return nil
		case <-lapse.C():
			lapse.retry() // refused again, the grant is tried again later, not at once
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil {
					return err
				}
				return ctx.Err()
			}
			if ev.Name != e.name {
				continue
			}
			if ev.Type.Ends() || ev.Type == kvlease.EventFreed {
				lapse.clear()
				return nil
			}
			lapse.saw(ev.Record)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Leader returns the current leader's record, read through the stream
// leader. Errors: [kvlease.ErrNotFound] if no one leads.
func (e *Election) Leader(ctx context.Context) (kvlease.Record, error) {
	return e.store.Get(ctx, e.name)
}

// LeaderChange is an observed change of leadership: Leader is nil when the
// election became vacant.
type LeaderChange struct {
	Leader *kvlease.Record
	// Cause says how a tenure ended: released, revoked or expired.
	Cause kvlease.EventType
	Time  time.Time
}

// Observe delivers the current leader (or vacancy: Leader nil and Cause 0),
// then every change of leader, until ctx ends; the channel is closed then,
// and also when the watch under it ends (its connection closed, its
// bucket deleted and made anew: see [kvlease.Watcher.Err]), with ctx
// still live: check ctx.Err() to tell which, and Observe again.
// Renewals are not changes. Changes are seen as the bucket's stream delivers
// them: a new leader learns of its win (its grant's reply) a moment before
// observers do. A reader that falls behind by 16 changes stalls the stream of
// changes, not the election.
//
// A leader whose end has not been seen by the server TTL (and a second)
// after its last grant or renewal seen is looked up ([Election.Leader]),
// and again every second while the server cannot be reached or still
// holds it: once the server says no one leads, the election is reported
// vacant, Cause [kvlease.EventExpired]. The end may never come otherwise:
// an observer cut off from the server while the lease lapsed, until the
// expiry marker had lapsed too (the bucket's marker TTL), resumes its
// watch after the last message it had, and nothing in the stream says
// the tenure ended; nor does a record the server keeps past its TTL (see
// [kvlease.OverdueGrace]). Until the server can be reached again the last
// leader seen is still shown: an observer does not guess.
func (e *Election) Observe(ctx context.Context) (<-chan LeaderChange, error) {
	w, err := e.store.Watch(ctx, e.name, kvlease.ExactName())
	if err != nil {
		return nil, err
	}
	out := make(chan LeaderChange, 16)
	go func() {
		defer close(out)
		defer w.Stop()
		var cur kvlease.Token
		var lapse lapseTimer // cur's end, if its event never comes
		defer lapse.clear()
		send := func(c LeaderChange) error {
			select {
			case out <- c:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		apply := func(ev kvlease.Event) error {
			switch {
			case ev.Name != e.name:
			case ev.Type.Ends() && cur != 0:
				cur = 0
				lapse.clear()
				return send(LeaderChange{Cause: ev.Type, Time: ev.Time})
			case !ev.Type.Ends() && ev.Token != cur:
				cur = ev.Token
				lapse.clear()
				lapse.saw(ev.Record)
				return send(LeaderChange{Leader: ev.Record, Time: ev.Time})
			case !ev.Type.Ends():
				lapse.saw(ev.Record) // a renewal
			}
			return nil
		}
		// lapsed looks up a leader whose end should have been seen by now.
		lapsed := func() error {
			gctx, cancel := context.WithTimeout(ctx, lapseReadTimeout)
			rec, err := e.Leader(gctx)
			cancel()
			switch {
			case errors.Is(err, kvlease.ErrNotFound):
				cur = 0
				lapse.clear()
				return send(LeaderChange{Cause: kvlease.EventExpired, Time: time.Now()})
			case err == nil && rec.Token == cur && rec.Revision > lapse.rev:
				lapse.saw(&rec) // renewed, the renewal not seen yet
			default:
				// Unreachable, a record the server keeps past its TTL,
				// or another tenure, which the watch delivers.
				lapse.retry()
			}
			return nil
		}
		// The replay first, then a vacancy if there was no leader in it.
		if w.CatchUp(ctx, apply) != nil || cur == 0 && send(LeaderChange{Time: time.Now()}) != nil {
			return
		}
		for {
			select {
			case ev, ok := <-w.Events():
				if !ok || apply(ev) != nil {
					return
				}
			case <-lapse.C():
				if lapsed() != nil {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// lapseSlack is how long after a tenure's server TTL, counted from when it
// was seen granted or renewed, its end is looked for if no event has shown
// it: the server lapses a key up to 250 ms late (DESIGN §2, item 7), and
// its marker is delivered a moment after. lapseRecheck spaces the looks
// after that; lapseReadTimeout bounds one. interruptedRecheck spaces the
// grant's attempts while a waiting candidate's watch is interrupted, and
// a leader's renewals then.
const (
	lapseSlack         = time.Second
	lapseRecheck       = time.Second
	lapseReadTimeout   = 2 * time.Second
	interruptedRecheck = time.Second
)

// lapseTimer fires when the tenure last seen live should have ended: its
// server TTL and lapseSlack after it was seen granted or renewed, on this
// process's monotonic clock (a record is seen after it was stored, so
// never before the server lapses it; the server's wall-clock stamps are
// not compared with this machine's). Not safe for concurrent use.
type lapseTimer struct {
	token kvlease.Token
	rev   uint64 // the revision last seen
	t     *time.Timer
}

// saw counts a grant or renewal seen live, rec (nil: none known).
func (l *lapseTimer) saw(rec *kvlease.Record) {
	if rec == nil || rec.TTL <= 0 || rec.Token == l.token && rec.Revision <= l.rev {
		return
	}
	l.token, l.rev = rec.Token, rec.Revision
	l.arm(rec.TTL + lapseSlack)
}

// retry fires again after lapseRecheck.
func (l *lapseTimer) retry() { l.arm(lapseRecheck) }

func (l *lapseTimer) arm(d time.Duration) {
	if l.t == nil {
		l.t = time.NewTimer(d)
		return
	}
	l.t.Reset(d)
}

// clear forgets the tenure: the timer fires no more until saw.
func (l *lapseTimer) clear() {
	if l.t != nil {
		l.t.Stop()
	}
	l.token, l.rev = 0, 0
}

// C is the timer's channel, nil (never ready) before the first saw.
func (l *lapseTimer) C() <-chan time.Time {
	if l.t == nil {
		return nil
	}
	return l.t.C
}

// String describes a change for logs.
func (c LeaderChange) String() string {
	if c.Leader == nil {
		if c.Cause != 0 {
			return fmt.Sprintf("vacant (%s)", c.Cause) // how the last tenure ended
		}
		return "vacant"
	}
	return fmt.Sprintf("%s (token %d)", c.Leader.Holder, c.Leader.Token)
}
