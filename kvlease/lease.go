package kvlease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/telemetry"
)

// Lease is the holder's side of a tenure: its fencing token and its own
// deadline, computed from a monotonic clock read just before the request was
// sent: t0 + D·(1−ρ) − margin. On Linux that clock also counts the time the
// machine was suspended (Go's own monotonic clock does not: a laptop that
// slept would have resumed still counting the lease as held). The grantor keeps the key for at least
// ceil(D + grantor margin) after it stored the request, which is after t0, so
// the holder's right always ends before anyone else can be granted the lease.
//
// That holds for clocks that run at rates within ρ of each other. It does
// not hold across a pause: a process stopped between [Lease.Check] and its
// effect acts late without knowing. Only a resource that checks the token
// (a fence: see [github.com/leased/leased/kvlease/fence], or the SQL pattern in docs/fencing.md) makes that
// harmless.
//
// A Lease is safe for concurrent use. Keep it renewed with [Keep].
type Lease struct {
	g      Grantor
	name   string
	holder string
	d      time.Duration
	margin time.Duration
	rho    float64
	now    func() time.Time
	guard  func(rho float64) bool
	tracer trace.Tracer

	renewing chan struct{} // one renewal at a time (a second would only find its revision stale); a channel, so a waiter respects ctx
	cut      chan struct{} // closed (closeCut) by Release or a refusal, which move the deadline to now

	mu       sync.Mutex
	rec      Record
	secret   string
	t0       time.Time // when the last successful request was sent
	deadline time.Time // t0 + HolderValidity
	released bool      // Release was called: the lease is over for the holder
	refused  error     // the grantor refused a renewal: the lease is over for the holder
	freed    bool      // a Release reached the grantor (or found nothing to release)
	// unconfirmed: a renewal went out since the last confirmed one and got
	// no answer; it may have been stored (see [StaleRevisionError]).
	unconfirmed bool
	// unanswered counts the renewals that went unanswered since the last
	// confirmed one, lastFailure is the last one's error: what a loss at
	// the deadline says (LeaseExpiredError).
	unanswered  int
	lastFailure error

	lateEffects atomic.Int64
	metrics     atomic.Pointer[telemetry.Metrics] // set by a keeper with metrics
	kept        atomic.Bool                       // a Keeper runs on the lease (Keep refuses a second)
}

// Format prints what identifies the lease, and never its secret (%+v
// printed the struct, the secret twice; found by an outside client).
func (l *Lease) Format(f fmt.State, _ rune) {
	l.mu.Lock()
	tok := l.rec.Token
	l.mu.Unlock()
	fmt.Fprintf(f, "lease %q of %q, token %d, deadline %s", l.name, l.holder, tok, l.Deadline().Format(time.RFC3339Nano))
}

// LeaseOption configures [Acquire].
type LeaseOption func(*leaseOptions) error

type leaseOptions struct {
	margin    time.Duration
	marginSet bool
	rho       float64
	attrs     map[string]string
	now       func() time.Time
	guard     func(rho float64) bool
	tp        trace.TracerProvider
	attempt   time.Duration // bound on one grant attempt
	onRetry   func(error)   // called before each wait to send the grant again
}

// DefaultAttemptTimeout bounds one attempt of [Acquire]'s grant
// ([WithAttemptTimeout]).
const DefaultAttemptTimeout = 2 * time.Second

// WithAttemptTimeout bounds each attempt of [Acquire]'s grant (default
// [DefaultAttemptTimeout]): an attempt that gets no answer by then is sent
// again, with the same request ID, until Acquire's context ends. One below
// [MinAttemptTimeout] is an error.
func WithAttemptTimeout(d time.Duration) LeaseOption {
	return func(o *leaseOptions) error {
		if d < MinAttemptTimeout {
			return fmt.Errorf("%w: attempt timeout %v: at least %v", ErrInvalidOption, d, MinAttemptTimeout)
		}
		o.attempt = d
		return nil
	}
}

// WithOnGrantRetry calls f, with the attempt's error (it wraps
// [ErrUnavailable]), each time [Acquire] waits to send its grant again
// because the grantor did not answer it, or it could not be sent (not
// connected): a caller whose ctx allows a long wait can say why it waits.
// Calls are on Acquire's goroutine, not concurrent. A nil f is an error.
func WithOnGrantRetry(f func(error)) LeaseOption {
	return func(o *leaseOptions) error {
		if f == nil {
			return fmt.Errorf("%w: nil OnGrantRetry", ErrInvalidOption)
		}
		o.onRetry = f
		return nil
	}
}

// WithHolderTracerProvider sets where the holder's spans go (lease.holder.acquire,
// .renew, .release: each the parent of the grantor's span for the request,
// with the holder's margin and remaining time). Default: the grantor's own
// (Store.TracerProvider, or the service client's), else the global provider.
// It is not [WithTracerProvider], which sets where a [Store]'s (the
// grantor's) spans go. A nil provider is an error.
func WithHolderTracerProvider(tp trace.TracerProvider) LeaseOption {
	return func(o *leaseOptions) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
		}
		o.tp = tp
		return nil
	}
}

// WithClockGuard makes Check refuse (ErrClockRate, which is also
// ErrExpired) whenever exceeds(ρ) reports that the measured clock-rate error
// between holder and grantor is beyond the lease's bound ρ — for example
// client.Client's Clock().Exceeds (package grantor/client), fed by the server time in every reply.
// A nil func is an error.
func WithClockGuard(exceeds func(rho float64) bool) LeaseOption {
	return func(o *leaseOptions) error {
		if exceeds == nil {
			return fmt.Errorf("%w: nil clock guard", ErrInvalidOption)
		}
		o.guard = exceeds
		return nil
	}
}

// WithHolderMargin sets m_h, subtracted from the holder's deadline. Default
// [DefaultHolderMargin](D). A negative margin is an error (also
// [ErrInvalidTiming]); so, from [Acquire], is one that leaves no validity.
func WithHolderMargin(m time.Duration) LeaseOption {
	return func(o *leaseOptions) error {
		if m < 0 {
			return fmt.Errorf("%w: holder margin: %w", ErrInvalidOption, validateMargin(m))
		}
		o.margin, o.marginSet = m, true
		return nil
	}
}

// WithClockRate sets ρ, the bound on the rate difference between this
// machine's clock and the server's. Default [DefaultClockRate]. A bound
// outside [0, 0.1) (or NaN) is an error (also [ErrInvalidTiming]).
func WithClockRate(rho float64) LeaseOption {
	return func(o *leaseOptions) error {
		if err := validateRate(rho); err != nil {
			return fmt.Errorf("%w: clock rate: %w", ErrInvalidOption, err)
		}
		o.rho = rho
		return nil
	}
}

// WithAttributes annotates the tenure (stored in the lease record). A nil
// or empty map means none; an empty key is an error. The grantor may refuse
// attributes over its size limit when the grant is sent.
func WithAttributes(attrs map[string]string) LeaseOption {
	return func(o *leaseOptions) error {
		if _, ok := attrs[""]; ok {
			return fmt.Errorf("%w: empty attribute key", ErrInvalidOption)
		}
		o.attrs = attrs
		return nil
	}
}

// Acquire asks g for a tenure of duration d and returns the holder's lease.
// The deadline counts from the monotonic time read before the request went
// out, not from the reply, and for the shorter of d and the duration the
// grantor's record says it granted: a grantor that grants less is trusted,
// one that claims to grant more is not.
//
// A grant that gets no answer ([ErrUnavailable]: no reply within the
// attempt timeout, [WithAttemptTimeout], or a grantor that cannot reach
// its bucket) is sent again, with the same request ID and secret
// ([GrantRequest].RequestID), after a backoff, until ctx ends: a reply
// lost after the grantor stored the grant costs nothing, since the retry
// is answered with that tenure. The deadline of a tenure recovered so
// counts from the send of the first attempt, the earliest moment it can
// have been stored (docs/safety.md, "Lost replies"). Bound the wait with
// ctx. If ctx ends while an attempt is unanswered, Acquire gives back what
// that attempt may have granted before it returns (the request sent once
// more and released, within a second each past ctx): a tenure no caller
// holds would otherwise keep the lease until its TTL. That is best effort
// on a [Store]: a grant that waits in a stalled server longer than that
// (a paused server, say) is stored when the server resumes, and holds the
// lease, held by no one, for its TTL. Through the service ([LateBounder])
// it is not carried out that late.
//
// A grant answered only after the holder's deadline (counted from the
// first attempt sent) had passed, a grantor that stalled (a quorum loss), is
// no lease to return: Acquire gives that tenure back (its release sent
// past ctx, within a second, again while unanswered) and asks anew, and
// gives up with [ErrUnavailable] after 3 such answers in a
// row. A refusal by a late tenure it could not give back is its own: it
// releases it once more and asks again.
//
// Errors: [ErrInvalidOption] for an option that refuses its value, and
// [ErrInvalidTiming] if the margins leave no validity (nothing sent either
// way); otherwise those of [Store.Grant], including [HeldError], the last
// [ErrUnavailable] once ctx has ended, or [ErrUnavailable] after late
// answers, as above.
func Acquire(ctx context.Context, g Grantor, name, holder string, d time.Duration, opts ...LeaseOption) (*Lease, error) {
	if st, ok := g.(*Store); g == nil || ok && st == nil {
		return nil, fmt.Errorf("%w: nil grantor", ErrInvalidOption)
	}
	o, err := newLeaseOptions(d, opts)
	if err != nil {
		return nil, err
	}
	if o.tp == nil {
		o.tp = otel.GetTracerProvider()
		if t, ok := g.(interface{ TracerProvider() trace.TracerProvider }); ok {
			o.tp = t.TracerProvider()
		}
	}
	l := &Lease{g: g, name: name, holder: holder, d: d, margin: o.margin, rho: o.rho, now: o.now, guard: o.guard,
		tracer: o.tp.Tracer(instrumentationName), renewing: make(chan struct{}, 1), cut: make(chan struct{})}
	ctx, span := l.startSpan(ctx, "acquire")
	rec, t0, attempts, unanswered, err := l.grant(ctx, GrantRequest{Name: name, Holder: holder, Duration: d, Attributes: o.attrs}, o.attempt, o.onRetry)
	span.SetAttributes(telemetry.AttrAttempts.Int(attempts))
	if err != nil {
		if unanswered != nil {
			l.giveBack(ctx, *unanswered)
		}
		endSpan(span, nil, err)
		return nil, err
	}
	l.rec, l.secret, l.t0, l.deadline = rec, rec.Secret, t0, t0.Add(HolderValidity(granted(d, rec), o.rho, o.margin))
	if g := granted(d, rec); g < d && HolderValidity(g, o.rho, o.margin) <= 0 {
		// Granted too little to hold at all with this margin: give it back.
		err := fmt.Errorf("%w: %q was granted for %v (asked %v), which the holder margin %v leaves no time of",
			ErrInvalidTiming, name, g, d, o.margin)
		_ = l.Release(ctx)
		endSpan(span, &rec, err)
		return nil, err
	}
	span.SetAttributes(telemetry.AttrRemainingAfter.Int64(l.deadline.Sub(l.now()).Milliseconds()),
		telemetry.AttrRecovered.Bool(rec.Recovered))
	endSpan(span, &rec, nil)
	return l, nil
}

// newLeaseOptions applies opts for a lease of duration d and checks the
// window they leave: what Acquire refuses before it sends anything.
func newLeaseOptions(d time.Duration, opts []LeaseOption) (leaseOptions, error) {
	o := leaseOptions{rho: DefaultClockRate, now: holderNow, attempt: DefaultAttemptTimeout}
	for _, opt := range opts {
		if opt == nil {
			return o, fmt.Errorf("%w: nil lease option", ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	if d < MinDuration {
		return o, fmt.Errorf("%w: %v is below %v", ErrDurationOutOfRange, d, MinDuration)
	}
	if !o.marginSet {
		o.margin = DefaultHolderMargin(d)
	}
	return o, ValidateWindow(d, o.margin, o.rho)
}

// granted is the duration a holder that asked for d may count on from
// rec: the shorter of d and what the grantor says it granted (a grantor
// that grants less is trusted, as by Renew; one that claims more is not).
func granted(d time.Duration, rec Record) time.Duration {
	if rec.Duration > 0 {
		return min(d, rec.Duration)
	}
	return d
}

// LateBounder is implemented by a [Grantor] that bounds how late an
// unanswered request can still be carried out: not after LateWindow past
// the end of the context it was sent with (ok false: no bound known, as for
// a publish that may sit in a socket). The service client has one: its
// requests carry their deadline, and the service carries out none that
// arrives after it.
type LateBounder interface {
	LateWindow() (window time.Duration, ok bool)
}

// grant sends req until it is answered or ctx ends, every attempt with one
// request ID and secret and bounded by attempt, and returns the record,
// the send time of the first attempt (t0) and the number of attempts. A
// request whose tenure has ended ([ErrRequestUsed]), or was answered
// (recovered or not) too late to leave any validity, is given back and
// replaced by a new one, from a new t0.
//
// A refusal (held) after unanswered attempts is not final at once: an
// unanswered attempt may still be carried out, when the lease has become
// free, granting it to a caller that has gone. Where the grantor bounds
// how late that can be ([LateBounder]), a refusal to an attempt sent
// before that bound is followed by one more attempt with the same request
// ID, sent after it: then an attempt carried out late is recovered rather
// than left orphaned. That holds for every unanswered attempt, the ones
// after a first such wait included.
//
// unanswered, with an error, is the request if an attempt of it went
// unanswered (the ctx ended during it, say): one that the grantor may have
// carried out, or may yet.
func (l *Lease) grant(ctx context.Context, req GrantRequest, attempt time.Duration, onRetry func(error)) (rec Record, t0 time.Time, n int,
	unanswered *GrantRequest, err error) {
	var lateUntil time.Time // no unanswered attempt of this request is carried out after it
	lateKnown := true       // false once an unanswered attempt has no bound
	lb, _ := l.g.(LateBounder)
	sent := false // an attempt of this request has gone out
	renew := func() {
		req.RequestID, req.Secret = NewRequestID()
		t0, lateUntil, lateKnown, unanswered, sent = l.now(), time.Time{}, true, nil, false
	}
	renew()
	// late: rec, an answer, leaves the holder no time, though its duration
	// would (one too short for the margin is Acquire's to refuse).
	late := func(rec Record) bool {
		v := HolderValidity(granted(req.Duration, rec), l.rho, l.margin)
		return v > 0 && !t0.Add(v).After(l.now())
	}
	lateAnswers := 0
	// orphan is a late tenure of ours that releaseBack could not give
	// back: a refusal naming it is ours to clear, not a holder's.
	var orphan *Record
	var orphanSecret string
	const firstWait, maxWait = 50 * time.Millisecond, time.Second
	for wait := firstWait; ; wait = min(2*wait, maxWait) {
		if err := ctx.Err(); err != nil {
			// Nothing would be sent (nats.go sends no request on an ended
			// ctx), and nothing must be given back for this attempt: an
			// unanswered error here made giveBack grant and release a
			// tenure for a caller that had already gone (found by an
			// outside client: every Acquire with a cancelled ctx).
			return Record{}, t0, n, unanswered, translate("grant", err)
		}
		n++
		if !sent {
			// The deadline counts from the first attempt that goes out:
			// one not sent took no effect. Counted from the first attempt
			// made, a grant answered as the connection came back after an
			// outage longer than the lease's validity was taken for a late
			// answer, given back and asked for again (found by an outside
			// client: a tenure held by no one, which observers saw lead).
			t0 = l.now()
		}
		sentAt := time.Now()
		actx, cancel := context.WithTimeout(ctx, attempt)
		ends, _ := actx.Deadline()
		rec, err = l.g.Grant(actx, req)
		cancel()
		if !errors.Is(err, ErrNotSent) {
			sent = true
		}
		if errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrNotSent) {
			u := req
			unanswered = &u
		}
		switch {
		case err == nil && late(rec):
			// The holder's deadline passed while it asked (recovered, or
			// granted by a late attempt: the deadline counts from the
			// first): give the tenure back (best effort; it lapses by its
			// TTL otherwise), ask anew. A grant answered after a quorum
			// loss was returned expired (found by an outside client).
			// Given back past ctx and retried: a release on the caller's ctx,
			// sent once, left the tenure held by no one when ctx ended
			// during it or its answer was lost, and the next attempt was
			// refused by it (found in review).
			if !l.releaseBack(ctx, req, rec) {
				orphan = &Record{Name: req.Name, Holder: req.Holder, Token: rec.Token, Revision: rec.Revision}
				orphanSecret = req.Secret
			}
			if lateAnswers++; lateAnswers == maxLateAnswers {
				return Record{}, t0, n, nil, fmt.Errorf("%w: grant: %q was granted %d times in a row only after the holder's deadline had passed "+
					"(the grantor answers slower than the lease's validity)", ErrUnavailable, req.Name, lateAnswers)
			}
			renew()
		case err == nil:
			return rec, t0, n, nil, nil
		case errors.Is(err, ErrRequestUsed):
			renew()
		case errors.Is(err, ErrConnClosed):
			return Record{}, t0, n, unanswered, err // it never comes back
		case errors.Is(err, ErrNotSent) && ctx.Err() == nil:
			// Nothing went: no attempt to wait out.
			if onRetry != nil {
				onRetry(err)
			}
		case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
			if onRetry != nil {
				onRetry(err)
			}
			w, ok := time.Duration(0), false
			if lb != nil {
				w, ok = lb.LateWindow()
			}
			lateKnown = lateKnown && ok
			if ends.Add(w).After(lateUntil) {
				lateUntil = ends.Add(w)
			}
		case orphan != nil && heldBy(err, *orphan):
			// Refused by the late tenure not given back: once more.
			r := *orphan
			if !l.releaseBack(ctx, GrantRequest{Name: r.Name, Holder: r.Holder, Secret: orphanSecret}, r) {
				return Record{}, t0, n, unanswered, err
			}
			orphan, wait = nil, firstWait/2 // soon, and the backoff grows again from there (0 stayed 0)
		case errors.Is(err, ErrHeld) && lateKnown && sentAt.Before(lateUntil):
			// An unanswered attempt may still be carried out after this
			// one's read: wait it out, then ask once more.
			wait = time.Until(lateUntil)
		default:
			if errors.Is(err, ErrHeld) && lateKnown && !sentAt.Before(lateUntil) {
				// Answered after every unanswered attempt's last chance to
				// be carried out: there is nothing to give back (found in
				// review: a throwaway grant and release otherwise, if the
				// lease had come free meanwhile).
				unanswered = nil
			}
			return Record{}, t0, n, unanswered, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			if err == nil {
				err = translate("grant", ctx.Err())
			}
			return Record{}, t0, n, unanswered, err // a refusal waiting for its last attempt stays the refusal
		}
	}
}

// maxLateAnswers bounds the grants in a row answered after the holder's
// deadline that Acquire gives back and asks again for.
const maxLateAnswers = 3

// heldBy says err is a refusal because of the tenure rec (not revoked).
func heldBy(err error, rec Record) bool {
	var held *HeldError
	return errors.As(err, &held) && held.HeldBack == 0 && held.Holder == rec.Holder && held.Token == rec.Token
}

// releaseBack releases rec, a tenure granted for req that no caller will
// hold, best effort: past ctx, within giveBackTimeout, asked again while
// the grantor does not answer. It reports whether the tenure is gone.
func (l *Lease) releaseBack(ctx context.Context, req GrantRequest, rec Record) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveBackTimeout)
	defer cancel()
	_, err := RetryUnavailable(ctx, 200*time.Millisecond, nil, func() (struct{}, error) {
		return struct{}{}, l.g.Release(ctx, ReleaseRequest{Name: req.Name, Holder: req.Holder, Token: rec.Token,
			Revision: rec.Revision, Secret: req.Secret})
	})
	return err == nil || errors.Is(err, ErrNotFound)
}

// giveBackTimeout bounds [Lease.giveBack] (its grant, then its release)
// and [Lease.releaseBack].
const giveBackTimeout = time.Second

// giveBack returns, best effort, the tenure an unanswered attempt of req
// may have made, as Acquire returns an error: its ctx ended while the
// grantor had the request, which it may have carried out, or may yet (a
// service's queue). Left alone, that tenure held the lease for its whole
// TTL with no one to use it: a caller's own holder name refused until
// then, a leader elected that never knew it, a claimed item no one
// worked (found by an outside client: 51 of 200 Acquires with contexts of
// 0.2–4 ms). The request is sent once more, with its request ID and
// secret, past the caller's ctx but within giveBackTimeout, and what it
// is answered with is released: the tenure that attempt made (recovered),
// or one made now, whose release (carrying the request ID) the attempt
// then meets if it is carried out later. Held by another, or no answer:
// nothing more is done (a tenure made then lapses by its TTL). The grant
// and the release have giveBackTimeout each.
func (l *Lease) giveBack(ctx context.Context, req GrantRequest) {
	ctx = context.WithoutCancel(ctx)
	gctx, cancel := context.WithTimeout(ctx, giveBackTimeout)
	rec, err := l.g.Grant(gctx, req)
	cancel()
	if err != nil {
		return
	}
	// A budget of its own: a slow grant must not leave the tenure it made
	// without the time to release it (found in review).
	l.releaseBack(ctx, req, rec)
}

// startSpan starts the holder's span of an operation on the lease. The
// grantor's span for the request (the Store's or the service client's) is
// its child; the holder's adds what only the holder knows, its margin and,
// set by the caller, the time it has left.
func (l *Lease) startSpan(ctx context.Context, op string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	attrs = append(attrs, telemetry.AttrName.String(l.name), telemetry.AttrHolder.String(l.holder),
		telemetry.AttrDuration.Int64(l.d.Milliseconds()), telemetry.AttrHolderMargin.Int64(l.margin.Milliseconds()))
	return l.tracer.Start(ctx, "lease.holder."+op, trace.WithAttributes(attrs...))
}

// Name returns the lease name.
func (l *Lease) Name() string { return l.name }

// Holder returns the holder identity.
func (l *Lease) Holder() string { return l.holder }

// Duration returns D.
func (l *Lease) Duration() time.Duration { return l.d }

// Margin returns the holder margin m_h.
func (l *Lease) Margin() time.Duration { return l.margin }

// Token returns the fencing token: the revision that began the tenure. Pass
// it with every effect to a resource that checks it.
func (l *Lease) Token() Token {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec.Token
}

// Record returns the grantor's record from the last grant or renewal.
func (l *Lease) Record() Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Deadline returns the holder's deadline as a time of time.Now's clock
// (with a monotonic reading), for timers and logs: time.Until of it is
// [Lease.Remaining]. The lease counts on a clock that also counts the
// time the machine is suspended (CLOCK_BOOTTIME on Linux): a suspension after the
// call brings the deadline nearer than the time returned, which Check,
// Remaining and a keeper count and a timer set from it does not.
func (l *Lease) Deadline() time.Time {
	return time.Now().Add(l.Remaining())
}

// Remaining returns the time left before the deadline; ≤ 0 once it passed.
func (l *Lease) Remaining() time.Duration {
	l.mu.Lock()
	d := l.deadline
	l.mu.Unlock()
	return d.Sub(l.now())
}

// LogValue is how a Lease logs with log/slog: its name, holder, token
// and time left, never its secret (it logged as {}).
func (l *Lease) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", l.name), slog.String("holder", l.holder),
		slog.Uint64("token", uint64(l.Token())), slog.Duration("remaining", l.Remaining().Round(time.Millisecond)))
}

// Check returns nil if the holder may act now, and otherwise a
// [*LeaseExpiredError], or, when the lease's clock guard says the clocks'
// rates differ by more than ρ, an error matching [ErrExpired] and
// [ErrClockRate]. Call it immediately before every effect, not once per
// loop.
func (l *Lease) Check() error { return l.CheckFor(0) }

// CheckFor returns nil if at least need remains before the deadline: use it
// before an effect that takes need to land. An expired lease counts as an
// effect attempted after the deadline ([Lease.LateEffects]).
func (l *Lease) CheckFor(need time.Duration) error {
	need = max(need, 0) // a negative need must not reach past the deadline
	l.mu.Lock()
	rem, released, refused, token := l.deadline.Sub(l.now()), l.released, l.refused, l.rec.Token
	l.mu.Unlock()
	if rem > need { // never after a refusal, which moved the deadline to then
		return l.clockRateError()
	}
	if rem <= 0 && !released {
		l.lateEffects.Add(1)
		l.metrics.Load().LateEffect(context.Background())
	}
	return &LeaseExpiredError{Name: l.name, Token: token, Remaining: rem, Need: need, Margin: l.margin,
		Released: released, Refused: refused}
}

// clockRateError is the error of a lease whose clock guard says the
// clocks' rates differ by more than ρ, or nil.
func (l *Lease) clockRateError() error {
	if l.guard == nil || !l.guard(l.rho) {
		return nil
	}
	l.mu.Lock()
	token := l.rec.Token
	l.mu.Unlock()
	return fmt.Errorf("%w: %w: lease %q (token %d): the deadline assumes clock rates within %g",
		ErrExpired, ErrClockRate, l.name, token, l.rho)
}

// expired describes the lease as lost to its deadline (or its release) now.
func (l *Lease) expired() *LeaseExpiredError {
	l.mu.Lock()
	defer l.mu.Unlock()
	return &LeaseExpiredError{Name: l.name, Token: l.rec.Token, Remaining: l.deadline.Sub(l.now()), Margin: l.margin,
		Released: l.released, Refused: l.refused, Unanswered: l.unanswered, LastFailure: l.lastFailure}
}

// refuse ends the lease for the holder because the grantor answered a
// renewal with a refusal: every check fails from now on, not at the old
// deadline, because someone else may already hold the lease.
func (l *Lease) refuse(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refused == nil {
		l.refused = err
	}
	if now := l.now(); l.deadline.After(now) {
		l.deadline = now
	}
	// A keeper ends at once, whoever renewed: its Context stayed live
	// after a refusal to a caller of Renew until its deadline watch next
	// looked, a second later (found in review).
	l.closeCut()
}

// closeCut closes cut, once; l.mu is held.
func (l *Lease) closeCut() {
	select {
	case <-l.cut:
	default:
		close(l.cut)
	}
}

// isRefusal reports whether err is the grantor's answer that the renewal
// will not happen (not holder, not found, held, invalid …), as opposed to no
// answer (the renewal may have been stored), an expired deadline, or the
// caller's own cancellation.
func isRefusal(err error) bool {
	return err != nil && !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrExpired) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// LateEffects counts the checks that found the deadline already passed:
// "expiries during work".
func (l *Lease) LateEffects() int64 { return l.lateEffects.Load() }

// Renew extends the tenure. It refuses to send once the deadline has passed
// (a renewal is only a renewal if sent before the holder's deadline; after
// that, acquire a new tenure), and never leaves a request in flight past the
// deadline. On success the deadline moves to t0 + D·(1−ρ) − m_h, where t0 is
// when this renewal was sent.
//
// A refusal ([ErrNotHolder], [ErrNotFound], an unrecovered
// [StaleRevisionError], or any other answer that is not [ErrUnavailable])
// ends the lease at once: from then on Check, CheckFor,
// [github.com/leased/leased/kvlease/readlease.Read] and
// [github.com/leased/leased/kvlease/workqueue.Claim.Complete] fail with a
// [*LeaseExpiredError] whose Refused is the refusal, and Renew sends
// nothing more.
//
// Errors: [*LeaseExpiredError]; [ErrNotFound] once the lease was
// released ([Lease.Release]); those of [Store.Renew].
func (l *Lease) Renew(ctx context.Context) error {
	// Ended already: say so whatever ctx is (with ctx done too, the select
	// below took either at random: ErrUnavailable half of the time for a
	// released lease; found by an outside client).
	if err := l.ended(); err != nil {
		return err
	}
	select {
	case l.renewing <- struct{}{}:
		defer func() { <-l.renewing }()
	case <-ctx.Done():
		return fmt.Errorf("%w: renew %q: %w", ErrUnavailable, l.name, ctx.Err())
	}
	if err := l.ended(); err != nil {
		return err
	}
	l.mu.Lock()
	rec, deadline := l.rec, l.deadline
	l.mu.Unlock()
	t0 := l.now()
	ctx, span := l.startSpan(ctx, "renew", telemetry.AttrRemaining.Int64(deadline.Sub(t0).Milliseconds()))
	linkTo(span, rec.GrantTrace)
	next, err := l.renew(ctx, rec, t0, deadline)
	var stale *StaleRevisionError
	for tries := 0; errors.As(err, &stale) && stale.Revision > rec.Revision && l.isUnconfirmed() && tries < 3; tries++ {
		// An earlier renewal of ours was stored and its reply lost: the
		// tenure is ours at a newer revision. Renew that revision, as a new
		// request from now; the grantor checks holder, token and secret
		// against it, so a tenure renewed by anyone else is still refused.
		// Told again that the revision is stale, it tries again: more than
		// one renewal of ours may have gone unanswered (a recovery among
		// them), and one may land after the grantor named the revision
		// (found under overload: a lease lost while still ours). The bound
		// is for a tenure someone else keeps renewing, as in release.
		span.AddEvent("lease.lost_reply_recovered", trace.WithAttributes(telemetry.AttrRevision.Int64(int64(stale.Revision))))
		rec.Revision = stale.Revision
		next, err = l.renew(ctx, rec, l.now(), deadline)
	}
	if err != nil {
		switch {
		case errors.Is(err, ErrUnavailable):
			l.mu.Lock()
			l.unconfirmed = true
			l.unanswered, l.lastFailure = l.unanswered+1, err
			l.mu.Unlock()
		case isRefusal(err):
			l.refuse(err)
		}
		endSpan(span, &rec, err)
		return err
	}
	span.SetAttributes(telemetry.AttrRemainingAfter.Int64(l.Remaining().Milliseconds()))
	endSpan(span, &next, nil)
	return nil
}

// renew sends the renewal of rec (sent at t0, the lease valid until
// deadline) and, on success, moves the deadline.
func (l *Lease) renew(ctx context.Context, rec Record, t0, deadline time.Time) (Record, error) {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released { // Release was called meanwhile: send nothing more
		return Record{}, l.errReleased()
	}
	if !t0.Before(deadline) {
		return Record{}, &LeaseExpiredError{Name: l.name, Token: rec.Token, Remaining: deadline.Sub(t0), Margin: l.margin}
	}
	// Never past the deadline: counted from now, as a context's deadline
	// is on time.Now's clock and deadline on the lease's.
	ctx, cancel := context.WithTimeout(ctx, deadline.Sub(l.now()))
	defer cancel()
	next, err := l.g.Renew(ctx, RenewRequest{
		Name: l.name, Holder: l.holder, Token: rec.Token, Revision: rec.Revision, Duration: l.d, Secret: l.secret,
	})
	if now := l.now(); errors.Is(err, ErrUnavailable) && !now.Before(deadline) {
		// Unanswered until the deadline passed, the lease lapsed: say so,
		// not "unavailable", which blamed the grantor for a holder paused
		// while its renewal was out (found by an outside client: a
		// SIGSTOPped run's renewal, answered in 4 ms, was counted as a
		// renewal failure "unavailable" 8 s later).
		l.mu.Lock()
		l.unanswered, l.lastFailure = l.unanswered+1, err
		n := l.unanswered
		l.mu.Unlock()
		return Record{}, &LeaseExpiredError{Name: l.name, Token: rec.Token, Remaining: deadline.Sub(now), Margin: l.margin,
			Unanswered: n, LastFailure: err}
	}
	if err != nil {
		return Record{}, err
	}
	d := l.d
	if next.Duration > 0 {
		d = min(d, next.Duration) // trust what was granted, if less
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	// A grantor that answers after our deadline (ignoring ctx) may have
	// stored the renewal just as the old revision lapsed: not a renewal.
	// Read under the lock that moves the deadline: once the deadline has
	// passed (and a keeper has ended the tenure), no answer moves it again.
	if now := l.now(); !now.Before(deadline) {
		return Record{}, &LeaseExpiredError{Name: l.name, Token: rec.Token, Remaining: deadline.Sub(now), Margin: l.margin}
	}
	if next.Revision > l.rec.Revision {
		l.rec = next // even after Release: a release must name the newest revision
	}
	if t0.After(l.t0) && !l.released {
		l.t0, l.deadline = t0, t0.Add(HolderValidity(d, l.rho, l.margin))
	}
	l.unconfirmed, l.unanswered, l.lastFailure = false, 0, nil
	return next, nil
}

// ended is Renew's error for a lease released or refused: nil while
// neither.
func (l *Lease) ended() error {
	l.mu.Lock()
	released, refused := l.released, l.refused
	l.mu.Unlock()
	if released {
		return l.errReleased()
	}
	if refused != nil {
		return l.expired()
	}
	return nil
}

func (l *Lease) errReleased() error {
	return fmt.Errorf("%w: lease %q was released", ErrNotFound, l.name)
}

// isUnconfirmed reports whether a renewal went unanswered since the last
// confirmed one. Only a confirmed renewal clears the mark: a renewal that
// went unanswered may land at any time until then, a recovery's as well
// as the first's (cleared when a recovery was sent, it made the lease lost
// when a second one landed; found under overload).
func (l *Lease) isUnconfirmed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unconfirmed
}

// Release ends the tenure at the grantor. The lease is invalid from the
// moment Release is called, whatever it returns. A tenure that has already
// ended is not an error here, whoever has the lease since: lapsed or
// revoked and free ([ErrNotFound] from the grantor), or taken since by
// another holder, or by this holder in a new tenure ([ErrNotHolder] from
// the grantor, which Release passes on no more, as etcd's Mutex.Unlock,
// client-go's leader election and Curator's locks do not): there is
// nothing left to release, and the tenure that holds the lease now is
// never touched (the release names this tenure's token). Whether the
// tenure ended before Release is for [Lease.Check] or the keeper to say.
// Calling Release again after it succeeded does nothing; after it failed ([ErrUnavailable]) it tries again. Under
// a ctx already done (a deferred Release whose ctx a shutdown signal
// ended) it still sends the release, for up to 2 s, as [Keeper.Close]
// does: it sent none, and the lease stayed held by no one until its TTL
// (found by an outside client: defer l.Release(ctx) under
// signal.NotifyContext). A ctx that ends during Release still bounds it.
func (l *Lease) Release(ctx context.Context) (err error) {
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), min(max(l.Remaining(), 0)+l.margin, closeGrace))
		defer cancel()
	}
	return l.release(ctx, true)
}

// release is Release; retry says whether a grantor that does not answer,
// or a request that cannot be sent, is asked again (Release), or given up
// at once (a keeper's release after a loss, which must not hold up a
// holder that has lost its lease: with its server stopped, run exited
// 2 s after the deadline).
func (l *Lease) release(ctx context.Context, retry bool) (err error) {
	l.mu.Lock()
	rec, freed, now := l.rec, l.freed, l.now()
	remaining := l.deadline.Sub(now)
	if !l.released {
		l.released, l.deadline = true, now
		l.closeCut() // a keeper ends at once
	}
	l.mu.Unlock()
	if freed {
		return nil
	}
	ctx, span := l.startSpan(ctx, "release", telemetry.AttrRemaining.Int64(remaining.Milliseconds()))
	linkTo(span, rec.GrantTrace)
	defer func() { endSpan(span, &rec, err) }()
	// A grantor that does not answer (a failover, a paused node) is asked
	// again while ctx allows, for the lease's duration at most: the lease
	// lapses by itself then. One attempt left a failover's leases taken
	// for a TTL (found by an outside client). A retried release is
	// answered as the first (Store.Release).
	rctx, cancel := context.WithTimeout(ctx, l.d)
	defer cancel()
	release := func(rev uint64) error {
		attempt := func() (struct{}, error) {
			// Each attempt bounded, as a grant's: one sent to a stream
			// leader that has just died waits for its whole context.
			actx, cancel := context.WithTimeout(rctx, DefaultAttemptTimeout)
			defer cancel()
			return struct{}{}, l.g.Release(actx, ReleaseRequest{Name: l.name, Holder: l.holder, Token: rec.Token, Revision: rev, Secret: l.secret})
		}
		if !retry {
			_, err := attempt()
			return err
		}
		_, err := RetryUnavailable(rctx, time.Second, nil, attempt)
		return err
	}
	err = release(rec.Revision)
	// A renewal in flight when Release was called, or one whose reply was
	// lost, moved the revision on: name the current one (the grantor still
	// checks holder, token and secret). No renewal starts after Release, so
	// this converges; the bound is for a tenure someone else keeps renewing.
	var stale *StaleRevisionError
	for tries := 0; errors.As(err, &stale) && stale.Revision > rec.Revision && tries < 3; tries++ {
		rec.Revision = stale.Revision
		err = release(rec.Revision)
	}
	if err == nil || errors.Is(err, ErrNotFound) || tenureEnded(err) {
		l.mu.Lock()
		l.freed = true
		l.mu.Unlock()
		return nil
	}
	return err
}

// tenureEnded reports whether err, the grantor's refusal of a release of
// this Lease's tenure, says that the tenure has ended and another holds
// the lease since: [ErrNotHolder] names the live tenure, and tokens are
// never reused, so one that is not this Lease's means that this one ended
// (lapsed or revoked, and taken again, by another holder or by this one
// anew). Not a [StaleRevisionError]: that tenure is still this Lease's.
func tenureEnded(err error) bool {
	return errors.Is(err, ErrNotHolder) && !errors.Is(err, ErrStaleRevision)
}
