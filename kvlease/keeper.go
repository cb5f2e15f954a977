package kvlease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/leased/leased/telemetry"
)

// Keeper keeps a [Lease] renewed from its own goroutine.
//
// It renews every interval (default D/3) counted from when the last
// successful renewal was sent. A refused renewal ([ErrNotHolder],
// [ErrNotFound]) is a loss at once. A renewal that gets no answer is retried
// with backoff while time remains, but never sent after the holder's
// deadline, and no request is left in flight past it: when the deadline
// passes the lease is lost, at once, whatever the network is doing. A
// renewal that was sent may still be carried out later by a server that
// held it (a paused one, resumed): through the service, none is carried
// out past its deadline; on a [Store] directly, JetStream has no such
// bound, and the lease, held by no one now, lasts its TTL from then
// (docs/safety.md). Either way this holder has stopped at its deadline.
//
// On loss the keeper cancels [Keeper.Context], closes [Keeper.Done], and
// then calls the OnLost callback. Work guarded by the lease should watch the
// context and still call [Lease.Check] before each effect.
type Keeper struct {
	l        *Lease
	interval time.Duration
	onLost   func(error)
	onRenew  []func(Record, time.Time)
	onFail   []func(error, time.Duration)
	metrics  *telemetry.Metrics
	renewNow []<-chan struct{} // none: renew on the interval only

	ctx       context.Context
	cancel    context.CancelCauseFunc
	stop      chan struct{} // closed by Close/Orphan
	abort     chan struct{} // closed by Orphan: cancel a renewal in flight
	done      chan struct{} // closed when the loop has exited
	resumed   chan struct{} // watchDeadline saw the machine resume from suspension: renew now
	once      sync.Once
	abortOnce sync.Once
	handover  atomic.Bool // Orphan was called: leave the lease to run out

	mu  sync.Mutex
	err error

	renewals    atomic.Int64
	failures    atomic.Int64
	consecutive atomic.Int64
	spurious    atomic.Int64
	latency     latencyStats
}

// KeeperOption configures [Keep].
type KeeperOption func(*Keeper) error

// WithRenewInterval sets how often the keeper renews. It must be at least
// [MinRenewInterval] (else an error, also [ErrInvalidTiming]) and, from
// [Keep], at most half the holder's validity window (see
// [ValidateTiming]). Default D/3.
func WithRenewInterval(d time.Duration) KeeperOption {
	return func(k *Keeper) error {
		if err := validateInterval(d); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		k.interval = d
		return nil
	}
}

// WithOnLost sets a callback for the loss of the lease (not for Close or
// Orphan, nor for the end of Keep's ctx, which releases the lease as Close
// does: [Keeper.Err] then gives ctx's cause). It is called once, on the keeper's goroutine, after Context is
// cancelled and Done is closed; it may block and may call Close. A nil func
// is an error.
func WithOnLost(fn func(reason error)) KeeperOption {
	return func(k *Keeper) error {
		if fn == nil {
			return fmt.Errorf("%w: nil OnLost callback", ErrInvalidOption)
		}
		k.onLost = fn
		return nil
	}
}

// WithOnRenew adds a callback for each successful renewal, with the new
// record and the holder's new deadline. Callbacks are called on the
// keeper's goroutine, in order, and delay the next renewal while they run:
// keep them short, and do not call Orphan or Close from them (those wait for
// that goroutine, past their ctx). Context is still cancelled at the deadline while one runs.
// A nil func is an error.
func WithOnRenew(fn func(rec Record, deadline time.Time)) KeeperOption {
	return func(k *Keeper) error {
		if fn == nil {
			return fmt.Errorf("%w: nil OnRenew callback", ErrInvalidOption)
		}
		k.onRenew = append(k.onRenew, fn)
		return nil
	}
}

// WithOnRenewFailure adds a callback for each renewal attempt that fails
// without ending the tenure (no answer: it is tried again while the
// deadline allows), with the attempt's error and the time left before the
// holder's deadline: what a holder's log needs to show why a lease was
// lost after a run of them. Called as [WithOnRenew]'s callbacks are. A nil
// func is an error.
func WithOnRenewFailure(fn func(err error, remaining time.Duration)) KeeperOption {
	return func(k *Keeper) error {
		if fn == nil {
			return fmt.Errorf("%w: nil OnRenewFailure callback", ErrInvalidOption)
		}
		k.onFail = append(k.onFail, fn)
		return nil
	}
}

// WithRenewNow makes the keeper renew at once whenever ch receives, as
// well as every interval. Send on it when a watch of the lease sees the
// tenure end (revoked, released, lapsed) or the lease granted to another:
// the renewal is refused, and the lease is lost at once instead of at the
// next interval (up to D/3 later). A receive is only a hint: a lease still
// held is renewed early, nothing more. The leased CLI's run and elect feed
// it from the service's change events and from a watch of the bucket. The
// option adds ch: given more than once (an election adds its own to the
// caller's), the keeper hears every channel. Closing ch is one hint. Hints
// renew at most once per a tenth of the interval (100 ms at most): a hint
// sooner renews at that gap's end. A nil channel is an error.
func WithRenewNow(ch <-chan struct{}) KeeperOption {
	return func(k *Keeper) error {
		if ch == nil {
			return fmt.Errorf("%w: nil renew-now channel", ErrInvalidOption)
		}
		k.renewNow = append(k.renewNow, ch)
		return nil
	}
}

// hintGap is the least time between two renewals that renew-now hints
// make: a tenth of the interval, at most 100 ms.
func hintGap(interval time.Duration) time.Duration { return min(interval/10, 100*time.Millisecond) }

// renewNowHints merges the renew-now channels into one, read by the
// keeper's loop, until done is closed: nil (never ready) if there are none.
// A channel that is closed gives one hint and is heard no more (read as
// it stood, it renewed a thousand times a second; found by an outside
// client).
func (k *Keeper) renewNowHints(done <-chan struct{}) <-chan struct{} {
	if len(k.renewNow) == 0 {
		return nil
	}
	merged := make(chan struct{}, 1)
	for _, ch := range k.renewNow {
		go func() {
			for {
				select {
				case _, ok := <-ch:
					select {
					case merged <- struct{}{}:
					default: // a hint is pending already
					}
					if !ok {
						return
					}
				case <-done:
					return
				}
			}
		}()
	}
	return merged
}

// WithMeterProvider makes the keeper record the lease metrics (renewal
// latency and failures, effects attempted after the deadline) on mp.
// Default: no metrics. A nil provider is an error, as is one on which the
// instruments cannot be created.
func WithMeterProvider(mp metric.MeterProvider) KeeperOption {
	return func(k *Keeper) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		m, err := telemetry.NewMetrics(mp)
		if err != nil {
			return fmt.Errorf("%w: metrics: %w", ErrInvalidOption, err)
		}
		k.metrics = m
		return nil
	}
}

// Keep starts keeping l renewed until it is lost, [Keeper.Close]d, or ctx
// ends (which, like Close, releases the lease). It is lost at the renewal
// that is refused or finds the connection closed ([ErrConnClosed]), the
// next one due (or one a [WithRenewNow] hint brings forward), and at the
// deadline when renewals go unanswered (each retried while time remains).
//
// One Keeper keeps a lease at a time: a second Keep of it while the first
// runs is refused (two renewed it twice as often, and the first's Close
// released it under the second, which then lost it); once the first is
// Done (after [Keeper.Orphan], say) l may be kept again.
//
// Errors: [ErrInvalidOption] for an option that refuses its value, or a
// lease a Keeper keeps already; [ErrInvalidTiming] if the interval does
// not fit the lease.
func Keep(ctx context.Context, l *Lease, opts ...KeeperOption) (*Keeper, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil lease", ErrInvalidOption)
	}
	if !l.kept.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("%w: lease %q is kept by a Keeper already (one at a time: Close or Orphan it first)", ErrInvalidOption, l.name)
	}
	k := &Keeper{l: l, stop: make(chan struct{}), abort: make(chan struct{}), done: make(chan struct{}),
		resumed: make(chan struct{}, 1)}
	// The interval and the timing check go by what was granted, which a
	// grantor may make shorter than what was asked.
	if err := k.apply(granted(l.d, l.Record()), l.margin, l.rho, opts); err != nil {
		l.kept.Store(false)
		return nil, err
	}
	if k.metrics != nil {
		l.metrics.Store(k.metrics)
		k.metrics.HolderStarted(ctx)
	}
	k.ctx, k.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	go k.run(ctx, suspendedSinceStart(suspended()))
	return k, nil
}

// apply sets k's options for a lease of duration d, margin and rho, and
// checks the timing they leave: what Keep refuses before it starts.
func (k *Keeper) apply(d, margin time.Duration, rho float64, opts []KeeperOption) error {
	k.interval = DefaultRenewInterval(d)
	for _, opt := range opts {
		if opt == nil {
			return fmt.Errorf("%w: nil keeper option", ErrInvalidOption)
		}
		if err := opt(k); err != nil {
			return err
		}
	}
	return ValidateTiming(d, margin, k.interval, rho)
}

// Lease returns the lease being kept.
func (k *Keeper) Lease() *Lease { return k.l }

// Context is cancelled the moment the keeper finds the lease lost, or it
// is closed or orphaned; context.Cause gives the reason. A process paused
// past its deadline finds that only once it runs again, and a
// [Lease.Check] then (before each effect) can say so before the keeper
// has cancelled Context: Check is the test, Context the signal.
func (k *Keeper) Context() context.Context { return k.ctx }

// Done is closed when the keeper stops for any reason.
func (k *Keeper) Done() <-chan struct{} { return k.done }

// Err returns why the keeper stopped: the loss reason, [ErrClosed] after
// Close or Orphan, the context's error if ctx ended; nil while it runs. It
// is set before Context is cancelled, and is then what context.Cause
// gives.
func (k *Keeper) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// setErr records the first reason the keeper stops for, and returns it.
func (k *Keeper) setErr(err error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.err == nil {
		k.err = err
	}
	return k.err
}

// Orphan stops renewing without releasing (etcd's Session.Orphan): the
// keeper lets go of the lease, which runs out at its deadline (the server
// lapses it later). Context is cancelled and Done closed at once, but the
// [Lease] itself still passes [Lease.Check] until its deadline. Use it to
// hand over by expiry, or when a release could not be trusted to arrive.
// A Close after Orphan does not release.
func (k *Keeper) Orphan() {
	k.handover.Store(true)
	k.abortOnce.Do(func() { close(k.abort) })
	k.halt(context.Background())
}

// halt stops the loop, letting a renewal in flight finish unless ctx ends
// first.
func (k *Keeper) halt(ctx context.Context) {
	k.once.Do(func() { close(k.stop) })
	select {
	case <-k.done:
		return
	case <-ctx.Done():
	}
	k.abortOnce.Do(func() { close(k.abort) })
	<-k.done
}

// Close stops renewing and releases the lease, unless Orphan came first.
// A renewal in flight is let finish first (at most half a renewal
// interval, and no longer than ctx allows): cut short, it could have moved
// the lease to a revision the release would not know. A [WithOnRenew]
// callback running on the keeper's goroutine is waited for whatever ctx
// allows: Close cannot cut it short. A [WithOnLost] callback is not waited
// for (it runs after Done is closed, and may itself call Close). It returns the
// release error, if any. Close may be called more than once (defer it). Under a ctx already
// done (a deferred Close whose ctx a shutdown signal ended) it still sends
// the release, for up to 2 s: it sent none, and others waited for
// the lease's deadline (found by an outside client, with Resign).
//
// A lease lost is released all the same (a release names this holder's
// tenure, token and secret: it frees nothing of another's). Lost because
// the grantor found its tenure gone ([ErrNotFound]: revoked, or lapsed),
// it frees the lease at once from a revocation's hold ([Store.Revoke]).
// Lost at its deadline with renewals unanswered ([ErrExpired]: a stalled
// or paused NATS server), it frees the tenure that such a renewal, carried
// out once the server resumes, would bring back, live for a whole TTL with
// no holder (found by an outside client: elect's leases held for 10 s
// more by their stopped leaders). So call Close once the work under the
// lease has stopped, not before. After a loss that release is best
// effort: one attempt, of 2 s at most whatever ctx allows (and up to
// nats.go's connect timeout more while it reconnects, see [Grantor]; a defer'd
// Close after a paused server's loss waited out the lease's duration),
// none on a connection closed, given up at once if it cannot be sent (a
// connection reconnecting), and Close returns nil whatever its outcome
// (the loss is [Keeper.Err]). A server still paused 2 s after the loss
// gets the release late or not at all (the service drops a request past
// its deadline), and the tenure its late renewal brought back then runs
// out at its TTL.
func (k *Keeper) Close(ctx context.Context) error {
	ended := ctx.Err() != nil // a ctx that ends during Close bounds it, as the caller meant
	k.halt(ctx)
	if k.handover.Load() {
		return nil
	}
	if ended {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), min(max(k.l.Remaining(), 0)+k.l.margin, closeGrace))
		defer cancel()
	}
	if lost := k.Err(); !errors.Is(lost, ErrClosed) {
		if errors.Is(lost, ErrConnClosed) {
			return nil
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeGrace)
		defer cancel()
		_ = k.l.release(rctx, false)
		return nil
	}
	return k.l.release(ctx, true) // not Release: a ctx that ended during Close bounds it
}

// KeeperStats are the keeper's counters.
type KeeperStats struct {
	Renewals            int64         // successful renewals
	Failures            int64         // renewals that failed, all causes
	ConsecutiveFailures int64         // failures since the last success
	SpuriousLosses      int64         // losses while the lease was still ours at the server
	LateEffects         int64         // Checks that found the deadline passed ("expiries during work")
	LastLatency         time.Duration // round trip of the last successful renewal
	MaxLatency          time.Duration
	MeanLatency         time.Duration
}

// Stats returns a snapshot of the counters.
func (k *Keeper) Stats() KeeperStats {
	last, maxL, mean := k.latency.snapshot()
	return KeeperStats{
		Renewals:            k.renewals.Load(),
		Failures:            k.failures.Load(),
		ConsecutiveFailures: k.consecutive.Load(),
		SpuriousLosses:      k.spurious.Load(),
		LateEffects:         k.l.LateEffects(),
		LastLatency:         last,
		MaxLatency:          maxL,
		MeanLatency:         mean,
	}
}

// run renews until the lease ends; asleep is the time the machine had
// been suspended when Keep was called (see watchDeadline).
func (k *Keeper) run(parent context.Context, asleep time.Duration) {
	var reason error
	release := false        // the parent context ended: release after cancelling
	expiredCounted := false // a renewal failure counted "expired"
	defer func() {
		if release && k.handover.Load() {
			// Orphan, called as ctx ended, lost the loop's select to ctx:
			// it still hands over by expiry (it released).
			reason, release = ErrClosed, false
		}
		if release && k.ctx.Err() != nil {
			// watchDeadline ended the tenure first (a refusal, the
			// deadline, a Release), and ctx ended after it: a holder
			// that cancels ctx once Context ends. The loop, finding both
			// ended, took that for the holder's own end half of the time,
			// released and called no OnLost (found by an outside client).
			reason, release = context.Cause(k.ctx), false
		}
		reason = k.setErr(reason) // the deadline's, if watchDeadline came first
		if lostToDeadline(reason) && !expiredCounted {
			// The deadline came while the loop waited (to retry, or
			// for a renewal due after it: the holder paused), not during
			// an attempt, which counts its own: a loss is one failure
			// "expired" either way (it counted none, found by an
			// operator).
			k.metrics.RenewalFailed(context.Background(), "expired")
		}
		k.cancel(reason)
		if release {
			k.releaseAfterCancel()
		}
		k.l.kept.Store(false)
		close(k.done)
		// Not parent.Err(): a holder that cancels ctx once Context ends
		// (a deferred cancel) would have ended it by now, and its loss
		// gone unreported (found in review).
		if k.onLost != nil && !errors.Is(reason, ErrClosed) && !release {
			k.onLost(reason)
		}
	}()
	// Renewals run under a context that Orphan and ctx cancel, so neither
	// waits for a slow server.
	rctx, rcancel := context.WithCancel(parent)
	defer rcancel()
	go func() {
		select {
		case <-k.abort:
			rcancel()
		case <-rctx.Done():
		}
	}()

	go k.watchDeadline(asleep)

	backoff := firstRetryWait(k.interval)
	// The first renewal is due an interval after the lease's own t0, not
	// after Keep: the holder may have worked a while before keeping it.
	k.l.mu.Lock()
	first := k.l.t0.Add(k.interval).Sub(k.l.now()) // on the lease's clock, as t0 is
	k.l.mu.Unlock()
	timer := time.NewTimer(max(first, 0))
	defer timer.Stop()
	hintsDone := make(chan struct{})
	defer close(hintsDone)
	hints := k.renewNowHints(hintsDone)
	var hinted time.Time // when a hint last made a renewal
	deferred := false    // the timer is a hint's, put off to the gap's end
	for {
		expiry := time.NewTimer(k.l.Remaining())
		select {
		case <-timer.C:
			expiry.Stop()
			if deferred {
				hinted = time.Now()
			}
		case <-hints:
			expiry.Stop()
			// At most one renewal per hintGap for hints: forged events
			// published as the lease's made one synced renewal after
			// another (1,168 in 3 s, found by an outside client). A hint
			// within the gap renews at its end, none is lost.
			if wait := hintGap(k.interval) - time.Since(hinted); wait > 0 {
				if !deferred {
					timer.Reset(wait)
					deferred = true
				}
				continue
			}
			hinted = time.Now()
		case <-k.resumed:
			// The renewal timer stood still while the machine slept, and
			// what is left of the window may end before it fires.
			expiry.Stop()
		case <-expiry.C:
			reason = k.l.expired()
			return
		case <-k.stop:
			expiry.Stop()
			reason = ErrClosed
			return
		case <-parent.Done():
			expiry.Stop()
			reason, release = context.Cause(parent), true
			return
		case <-k.ctx.Done(): // watchDeadline ended it (a Release, a refusal)
			expiry.Stop()
			reason = context.Cause(k.ctx)
			return
		}
		deferred = false // a renewal now, whatever set the timer
		// A clock guard that trips ends the tenure as Check does, and one
		// that a deadline already ended (watchDeadline) stays ended.
		if err := k.l.clockRateError(); err != nil {
			reason = err
			return
		}
		if k.ctx.Err() != nil {
			reason = context.Cause(k.ctx)
			return
		}
		// Each attempt gets half an interval, at most maxAttempt (and never
		// past the deadline, which Renew enforces): a reply lost in a
		// reconnect costs a retry, not the lease.
		start := time.Now()
		actx, acancel := context.WithTimeout(rctx, min(k.interval/2, maxAttempt))
		err := k.l.Renew(actx)
		acancel()
		switch {
		case err == nil:
			k.latency.add(time.Since(start))
			k.metrics.RenewalSucceeded(context.Background(), time.Since(start))
			k.renewals.Add(1)
			k.consecutive.Store(0)
			backoff = firstRetryWait(k.interval)
			for _, fn := range k.onRenew {
				fn(k.l.Record(), k.l.Deadline())
			}
			timer.Reset(k.interval - time.Since(start))
			continue
		case rctx.Err() != nil && parent.Err() == nil: // Orphan
			reason = ErrClosed
			return
		case parent.Err() != nil:
			reason, release = context.Cause(parent), true
			return
		}
		k.failures.Add(1)
		k.consecutive.Add(1)
		k.metrics.RenewalFailed(context.Background(), outcome(err))
		expiredCounted = expiredCounted || outcome(err) == "expired"
		if errors.Is(err, ErrStaleRevision) {
			k.spurious.Add(1)
		}
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConnClosed) {
			// Refused, expired or invalid, or a connection its owner
			// closed, which never comes back: authority is gone now (it
			// retried a closed connection until the deadline).
			reason = err
			return
		}
		remaining := k.l.Remaining()
		if remaining <= 0 {
			reason = k.l.expired()
			return
		}
		for _, fn := range k.onFail {
			fn(err, remaining)
		}
		// No answer: retry soon, while time remains. The deadline timer
		// above still ends the tenure on time.
		timer.Reset(backoff)
		backoff = min(backoff*2, k.interval/2, maxRetryWait)
	}
}

// lostToDeadline reports whether err ends a tenure at its deadline, not
// at a release or a refusal.
func lostToDeadline(err error) bool {
	var le *LeaseExpiredError
	return errors.As(err, &le) && !le.Released && le.Refused == nil
}

// A renewal that goes unanswered is tried again and again until the
// deadline: each attempt bounded by maxAttempt (or half an interval), the
// waits between them growing from firstRetryWait to maxRetryWait (or half
// an interval). So a lease is renewed within maxAttempt + maxRetryWait of
// its grantor answering again: a cluster that takes 4-10 s to elect a new
// stream leader after its leader died costs a 20 s lease nothing, where
// waits doubling to half an interval left a leader back after 4.5 s unused
// until 8.7 s (found by an outside client). A server that is up answers a
// renewal in milliseconds, under load in tens of them; one whose answer
// comes after its attempt's bound has stored it, and the next attempt
// renews the revision it names (see Lease.Renew).
const (
	maxAttempt   = 2 * time.Second
	maxRetryWait = 500 * time.Millisecond
)

func firstRetryWait(interval time.Duration) time.Duration {
	return min(max(interval/10, 10*time.Millisecond), maxRetryWait)
}

// watchDeadline cancels Context at the holder's deadline, whatever the loop
// is doing: a renewal in flight to a grantor that ignores its context, or a
// slow OnRenew callback, must not keep work running past it. It follows the
// deadline as renewals move it, and ends with the context.
//
// A Release of the lease itself (not through the keeper) ends the
// deadline at once, and so Context, as Close would ([ErrClosed]); so does
// a renewal refused to a caller of [Lease.Renew], as a loss.
//
// Where the system counts the time it was suspended, it looks every
// suspendCheck (Go's timers stop while the machine sleeps, the lease's
// clock does not) and, when the machine has slept since it last looked,
// has the loop renew at once: the renewal's timer stood still too. asleep
// is the time suspended it has seen.
func (k *Keeper) watchDeadline(asleep time.Duration) {
	for {
		wait := max(k.l.Remaining(), 0)
		if suspendObservable {
			wait = min(wait, suspendCheck)
		}
		t := time.NewTimer(wait)
		select {
		case <-k.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-k.l.cut:
			t.Stop()
		}
		if s := suspendedSinceStart(suspended()); s >= asleep+suspendFloor {
			asleep = s
			select {
			case k.resumed <- struct{}{}:
			default: // one is pending already
			}
		}
		if k.l.Remaining() <= 0 {
			exp := k.l.expired()
			var err error = exp
			switch {
			case exp.Released:
				err = fmt.Errorf("%w: lease %q was released", ErrClosed, k.l.name)
			case exp.Refused != nil:
				// The refusal, as the loop reports one to its own renewal
				// (which this can come first to).
				err = exp.Refused
			}
			k.setErr(err) // before Context ends: Err is never nil once it has
			k.cancel(err)
			return
		}
	}
}

// closeGrace bounds the release Close sends under a ctx already done, and
// the one it sends after a loss.
const closeGrace = 2 * time.Second

// releaseAfterCancel releases when the keeper's parent context ends, bounded
// by the lease's remaining time (after which there is nothing to release).
func (k *Keeper) releaseAfterCancel() {
	ctx, cancel := context.WithTimeout(context.Background(), max(k.l.Remaining(), 0)+k.l.margin)
	defer cancel()
	_ = k.l.Release(ctx)
}

type latencyStats struct {
	mu         sync.Mutex
	last, maxL time.Duration
	sum        time.Duration
	n          int64
}

func (s *latencyStats) add(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.maxL, s.sum, s.n = d, max(s.maxL, d), s.sum+d, s.n+1
}

func (s *latencyStats) snapshot() (last, maxL, mean time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n > 0 {
		mean = s.sum / time.Duration(s.n)
	}
	return s.last, s.maxL, mean
}
