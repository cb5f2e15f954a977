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
// leadership then, not at the next renewal ([kvlease.WithRenewNow]).
//
// Errors: ctx's; [kvlease.ErrInvalidOption]; validation errors;
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
	for {
		// While the server does not answer, try again shortly.
		l, err := kvlease.RetryUnavailable(ctx, time.Second, o.OnUnavailable, func() (*kvlease.Lease, error) {
			return kvlease.Acquire(ctx, e.store, e.name, candidate, d, o.Lease...)
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
			if errors.As(err, &held) {
				heldBack = held.HeldBack
			}
			if err := e.waitVacant(ctx, w, heldBack); err != nil {
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
func (e *Election) watchEnd(w *kvlease.Watcher, k *kvlease.Keeper, now chan<- struct{}) {
	defer w.Stop()
	token := k.Lease().Token()
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return // the watch failed: the loss is found at the next renewal
			}
			if ev.Name == e.name && ev.Type.EndsTenure(ev.Token, token) {
				select {
				case now <- struct{}{}:
				default:
				}
			}
		case <-k.Done():
			return
		}
	}
}

// waitVacant waits for an event that ends a tenure of the election's lease
// or frees it after a revocation, or (heldBack > 0) for a revocation's
// hold to end.
// It does not consult Synced: the replay reports live tenures only, never
// ends. The watcher began before the first grant attempt, so the tenure
// that refused the grant was live after the watch began, and its end is
// delivered as a live event even if it came before this call (it waits in
// the watcher's buffer). An end of an earlier tenure may be waiting there
// too; it costs one more attempt. A watcher that falls behind may see the
// next grant instead of an end (the bucket keeps one message per lease):
// the lease is held again then, and waiting for that tenure's end is right.
func (e *Election) waitVacant(ctx context.Context, w *kvlease.Watcher, heldBack time.Duration) error {
	var free <-chan time.Time
	if heldBack > 0 {
		t := time.NewTimer(heldBack)
		defer t.Stop()
		free = t.C
	}
	for {
		select {
		case <-free:
			return nil
		case ev, ok := <-w.Events():
			if !ok {
				if err := w.Err(); err != nil {
					return err
				}
				return ctx.Err()
			}
			if ev.Name == e.name && (ev.Type.Ends() || ev.Type == kvlease.EventFreed) {
				return nil
			}
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
				return send(LeaderChange{Cause: ev.Type, Time: ev.Time})
			case !ev.Type.Ends() && ev.Token != cur:
				cur = ev.Token
				return send(LeaderChange{Leader: ev.Record, Time: ev.Time})
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
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
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
