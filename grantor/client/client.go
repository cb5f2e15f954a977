package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
)

const instrumentationName = "github.com/leased/leased/grantor/client"

// Client calls the lease service over NATS. It implements
// [kvlease.Grantor]: pass it to [kvlease.Acquire] and [kvlease.Keep].
// Errors are kvlease's ([kvlease.ErrHeld], [kvlease.ErrNotHolder], …),
// wrapped in a [*api.ServiceError] that carries the wire code.
type Client struct {
	nc      *nats.Conn
	tp      trace.TracerProvider
	tracer  trace.Tracer
	timeout time.Duration
	clock   ClockEstimator
	metrics *telemetry.Metrics
	seen    seenTokens

	measureMu sync.Mutex
	measuring *measurement // the clock read in flight; nil if none
}

// measurement is a read of the grantor's clock (Client.measureClock).
type measurement struct {
	done chan struct{} // closed when it ends
	err  error         // its error, once done is closed
}

var _ kvlease.Grantor = (*Client)(nil)

// ErrOption is wrapped by the errors of the options that refuse a value.
var ErrOption = errors.New("client: invalid option")

// Option configures [New]. An option returns an error for a value it
// cannot use; New returns that error.
type Option func(*Client) error

// WithTracerProvider sets where client spans go. Default: the global
// provider. A nil provider is an error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *Client) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrOption)
		}
		c.tp, c.tracer = tp, tp.Tracer(instrumentationName)
		return nil
	}
}

// WithMeterProvider records the estimated clock offset to the grantor
// (leased.clock.offset) and its error bound (leased.clock.margin) on mp.
// Default: no metrics. A nil provider is an error, as is one on which the
// instruments cannot be created.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *Client) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrOption)
		}
		m, err := telemetry.NewMetrics(mp)
		if err != nil {
			return fmt.Errorf("%w: metrics: %w", ErrOption, err)
		}
		c.metrics = m
		return nil
	}
}

// WithTimeout bounds a request when its context has no deadline. Default
// 5 s. A duration that is not positive is an error.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %v must be positive", ErrOption, d)
		}
		c.timeout = d
		return nil
	}
}

// New returns a client that sends requests on nc. It returns the first
// error of opts, or one for a nil nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil NATS connection", ErrOption)
	}
	tp := otel.GetTracerProvider()
	c := &Client{nc: nc, tp: tp, tracer: tp.Tracer(instrumentationName), timeout: 5 * time.Second}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrOption)
		}
		if err := opt(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Clock returns the estimate of the grantor's clock against this one, fed
// by every reply that carries the server's time. Pass Clock().Exceeds to
// kvlease.WithClockGuard to refuse to act when the rates drift apart.
func (c *Client) Clock() *ClockEstimator { return &c.clock }

// TracerProvider returns where the client's spans go. A [kvlease.Lease]
// acquired through the client sends its holder spans there too.
func (c *Client) TracerProvider() trace.TracerProvider { return c.tp }

// Grant asks for a tenure; the returned record carries the secret that
// renewals and releases must present. req.Duration is required, as for
// kvlease.Store.Grant: zero is out of range, not "the service's default".
func (c *Client) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	// As the service would, but before JSON turns bytes that are not
	// UTF-8 into U+FFFD on the way.
	if err := errors.Join(kvlease.ValidateName(req.Name), kvlease.ValidateHolder(req.Holder)); err != nil {
		return kvlease.Record{}, err
	}
	if err := c.measureClock(ctx); err != nil {
		return kvlease.Record{}, fmt.Errorf("%w: %w: grant %q: %w", kvlease.ErrUnavailable, kvlease.ErrNotSent, req.Name, err)
	}
	var out api.Lease
	err := c.call(ctx, api.SubjectGrant, api.GrantRequest{Name: req.Name, Holder: req.Holder, TTL: api.TTL(req.Duration),
		Attributes: req.Attributes, RequestID: req.RequestID, Secret: req.Secret}, &out)
	var held *kvlease.HeldError
	switch {
	case err == nil:
		c.seen.note(req.Name, kvlease.Token(out.Token), time.Now())
	case errors.As(err, &held):
		held.Name = req.Name
		if newer, ok := c.seen.newer(req.Name, held.Token, time.Now()); ok {
			// Not an answer: a retry of a request whose earlier attempt was
			// carried out must not stop on it (its tenure would be an orphan).
			return kvlease.Record{}, fmt.Errorf("%w: grant %q: the answering node says token %d holds it, but this client has seen token %d: that node's view is behind",
				kvlease.ErrUnavailable, req.Name, held.Token, newer)
		}
		c.seen.note(req.Name, held.Token, time.Now())
	}
	return out.Record(), err
}

// Renew extends a tenure.
func (c *Client) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	var out api.Lease
	wire := api.RenewRequest{Name: req.Name, Holder: req.Holder, Token: uint64(req.Token), Revision: req.Revision, Secret: req.Secret}
	if req.Duration != 0 { // zero keeps the tenure's duration, as in kvlease.Store.Renew
		wire.TTL = api.TTL(req.Duration)
	}
	err := c.call(ctx, api.SubjectRenew, wire, &out)
	nameStale(err, req.Name)
	if err == nil {
		c.seen.note(req.Name, kvlease.Token(out.Token), time.Now())
	}
	return out.Record(), err
}

// Release ends a tenure.
func (c *Client) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	err := c.call(ctx, api.SubjectRelease, api.ReleaseRequest{Name: req.Name, Holder: req.Holder, Token: uint64(req.Token),
		Revision: req.Revision, Secret: req.Secret}, nil)
	nameStale(err, req.Name)
	return err
}

// nameStale fills in the lease name of a conflict reply, which names only
// the current revision.
func nameStale(err error, name string) {
	var stale *kvlease.StaleRevisionError
	if errors.As(err, &stale) {
		stale.Name = name
	}
}

// Get returns a live lease.
func (c *Client) Get(ctx context.Context, name string) (api.Lease, error) {
	var out api.Lease
	err := c.read(ctx, api.SubjectGet, api.GetRequest{Name: name}, &out)
	return out, err
}

// List returns the live leases whose names start with prefix, in name
// order. A long list takes several requests (pages of at most [ListPage]
// leases, fewer where the NATS server's max payload allows fewer), each a
// read of its own: a lease granted or ended meanwhile shows as its page
// saw it.
func (c *Client) List(ctx context.Context, prefix string) ([]api.Lease, error) {
	var all []api.Lease
	req := api.ListRequest{Prefix: prefix, Limit: ListPage}
	for {
		var out api.ListReply
		if err := c.read(ctx, api.SubjectList, req, &out); err != nil {
			return nil, err
		}
		all = append(all, out.Leases...)
		if !out.More || len(out.Leases) == 0 {
			return all, nil
		}
		req.After = out.Leases[len(out.Leases)-1].Name
	}
}

// ListPage is how many leases [Client.List] asks for per request; a
// reply holds fewer if more would exceed the NATS server's max payload.
const ListPage = 10000

// Count returns how many live leases are under prefix, without them.
func (c *Client) Count(ctx context.Context, prefix string) (int, error) {
	var out struct {
		Leases []json.RawMessage `json:"leases"`
		Count  *int              `json:"count"`
	}
	if err := c.read(ctx, api.SubjectList, api.ListRequest{Prefix: prefix, CountOnly: true}, &out); err != nil {
		return 0, err
	}
	if out.Count == nil {
		return len(out.Leases), nil // a grantor older than count: it sent them all
	}
	return *out.Count, nil
}

// Revoke ends a lease regardless of its holder (an operator's request; NATS
// permissions may refuse it, which shows as [kvlease.ErrUnavailable] with
// no responders, or as a permissions error). As [kvlease.Store.Revoke], the
// lease stays held until the revoked holder's deadline has passed, unless
// opts has [kvlease.FreeNow]; with [kvlease.OnlyTenure], only that tenure
// is revoked.
func (c *Client) Revoke(ctx context.Context, name, reason string, opts ...kvlease.RevokeOption) (api.Lease, error) {
	var out api.Lease
	rev := kvlease.NewRevocation(opts...)
	err := c.call(ctx, api.SubjectRevoke, api.RevokeRequest{Name: name, Reason: reason,
		FreeNow: rev.FreeNow, Token: uint64(rev.Token)}, &out)
	return out, err
}

// observe feeds the clock estimate with a reply's server time.
func (c *Client) observe(sent time.Time, reply *nats.Msg) {
	server, err := time.Parse(time.RFC3339Nano, reply.Header.Get(api.HeaderServerTime))
	if err != nil {
		return // a grantor older than the header
	}
	c.clock.ObserveNode(reply.Header.Get(api.HeaderNode), sent, time.Now(), server)
	if offset, bound, _, _, ok := c.clock.Estimate(); ok || bound > 0 {
		c.metrics.ClockOffset(context.Background(), "grantor", offset, bound)
	}
}

// LateWindow bounds how late after its context ended a request of this
// client can still be carried out (kvlease.LateBounder): it carries its
// deadline on the grantor's clock, erring late by the offset's bound, and
// the service carries out none that arrives more than api.DeadlineSlack
// after it; the offset itself may be off by the bound again. ok is false
// while no offset is known (requests then carry no deadline).
func (c *Client) LateWindow() (time.Duration, bool) {
	_, bound, ok := c.clock.Offset()
	return api.DeadlineSlack + 2*bound + lateMargin, ok
}

// lateMargin covers the millisecond rounding of the deadline header and
// the time between a check of it and the write that follows.
const lateMargin = 50 * time.Millisecond

var _ kvlease.LateBounder = (*Client)(nil)

// measureClock reads the observer lease once if the grantor's clock offset
// is not known yet: its reply carries the server time, so that the request
// that follows carries a deadline (api.HeaderDeadline) and, should it wait
// in a paused node past that, is not carried out. It returns an error if
// no reply came within a quarter of the caller's time: the grant would
// then go out without a deadline to a grantor that may be paused, and be
// carried out when it resumes, long after its caller gave up, holding the
// lease for nobody for its TTL (found by an outside client). The read goes
// on meanwhile (for the client's timeout), and its reply, however late,
// measures the offset for the next attempt: a grantor that is only slow
// costs one retry. A read answered without the server time (an older
// grantor), or refused, lets the grant go without.
func (c *Client) measureClock(ctx context.Context) error {
	if _, _, ok := c.clock.Offset(); ok {
		return nil
	}
	if c.nc.IsClosed() {
		return kvlease.NotConnected(c.nc, "read the grantor's clock") // it never comes back
	}
	wait := c.timeout
	if dl, ok := ctx.Deadline(); ok {
		wait = time.Until(dl) // the grant itself gets the client's timeout otherwise
	}
	m := c.startMeasuring()
	t := time.NewTimer(wait / 4) // a quarter of the caller's time at most: the grant needs the rest
	defer t.Stop()
	select {
	case <-m.done:
		// Answered (the offset is known now), or refused or failed at once
		// (no grantor, not connected: the grant fails alike), the grant
		// goes; unanswered, it does not.
		if _, _, ok := c.clock.Offset(); ok || !(errors.Is(m.err, context.DeadlineExceeded) || errors.Is(m.err, nats.ErrTimeout)) {
			return nil
		}
		return fmt.Errorf("the grantor did not answer a read of its clock, which the grant's deadline needs: %w", m.err)
	case <-t.C:
	case <-ctx.Done():
	}
	if _, _, ok := c.clock.Offset(); ok {
		return nil
	}
	return errors.New("the grantor did not answer a read of its clock in time, which the grant's deadline needs (the read goes on: the next attempt may have it)")
}

// startMeasuring starts a read of the observer lease, whose reply measures
// the clock offset, unless one is in flight, and returns it.
func (c *Client) startMeasuring() *measurement {
	c.measureMu.Lock()
	defer c.measureMu.Unlock()
	if c.measuring != nil {
		return c.measuring
	}
	m := &measurement{done: make(chan struct{})}
	c.measuring = m
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
		// In attempts (read): one handed to a paused node is sent again,
		// most likely to another, after a third of the time.
		_, err := c.Get(ctx, api.ObserverLease) // any reply measures the clock
		c.measureMu.Lock()
		c.measuring = nil
		c.measureMu.Unlock()
		m.err = err
		close(m.done)
	}()
	return m
}

// call sends one request and decodes the reply or the error.
// read is call for a request that changes nothing (get, list, count,
// discover), which may be sent again: each attempt gets a third of the
// time left (at least readAttemptMin), and one that goes unanswered, or is
// answered "unavailable", is sent again while time remains. The service's
// queue group hands each attempt to any grantor node: one that is paused
// holds what it is handed, unanswered, until the others drop their routes
// to it (seconds), and a retry most likely goes to another. "No
// responders" (no grantor at all) is not retried.
func (c *Client) read(ctx context.Context, subject string, req, resp any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	dl, _ := ctx.Deadline()
	for {
		actx, cancel := context.WithTimeout(ctx, max(time.Until(dl)/3, readAttemptMin))
		start := time.Now()
		err := c.call(actx, subject, req, resp)
		cancel()
		if err == nil || !errors.Is(err, kvlease.ErrUnavailable) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, kvlease.ErrConnClosed) || ctx.Err() != nil || time.Until(dl) < readAttemptMin {
			return err
		}
		if took := time.Since(start); took < readAttemptMin/5 { // answered "unavailable": not at once again
			select {
			case <-time.After(readAttemptMin/5 - took):
			case <-ctx.Done():
				return err
			}
		}
	}
}

// readAttemptMin is the shortest attempt of read.
const readAttemptMin = 500 * time.Millisecond

func (c *Client) call(ctx context.Context, subject string, req, resp any) (err error) {
	ctx, span := c.tracer.Start(ctx, subject, trace.WithSpanKind(trace.SpanKindClient))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("client: encode %s: %w", subject, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: telemetry.Inject(ctx, nil)}
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(api.HeaderTimeout, strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10))
		// The deadline on the grantor's clock: a request that arrives after
		// it is not carried out. Without an estimate yet (no reply so far),
		// none is sent. A renewal's errs early by the estimate's bound (the
		// grantor gives it no slack either): one carried out after the
		// holder's deadline would extend a lease its holder has given up.
		// Other requests' err late: a grant made for a caller that has just
		// given up only keeps the lease taken for a while.
		if offset, bound, ok := c.clock.Offset(); ok {
			if subject == api.SubjectRenew {
				bound = -bound
			}
			msg.Header.Set(api.HeaderDeadline, strconv.FormatInt(dl.Add(offset+bound).UnixMilli(), 10))
		}
	}
	if !c.nc.IsConnected() {
		// A request published while reconnecting is buffered and sent on
		// reconnect, maybe after the holder's deadline (docs/safety.md).
		return kvlease.NotConnected(c.nc, subject)
	}
	if limit := c.nc.MaxPayload(); limit > 0 && int64(len(data)) > limit {
		// Refused before it is sent, every time: not "unavailable", which
		// Acquire retries until its context ends (found by an outside client).
		return fmt.Errorf("%w: %s: a request of %d bytes, over the NATS server's max_payload of %d (smaller attributes)",
			kvlease.ErrTooLarge, subject, len(data), limit)
	}
	sent := time.Now()
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrMaxPayload): // with its headers
		return fmt.Errorf("%w: %s: %w", kvlease.ErrTooLarge, subject, err)
	case errors.Is(err, nats.ErrConnectionClosed): // closed while it was out
		return fmt.Errorf("%w: %w: %s: %w", kvlease.ErrUnavailable, kvlease.ErrConnClosed, subject, err)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", kvlease.ErrUnavailable, subject, err)
	}
	c.observe(sent, reply)
	if code := reply.Header.Get(api.HeaderErrorCode); code != "" {
		body := api.ErrorBody{Code: code, Message: reply.Header.Get(api.HeaderError)}
		_ = json.Unmarshal(reply.Data, &body) // the body adds holder and token for "held"
		if code == api.CodeTooLate && time.Since(sent) < api.DeadlineSlack {
			// Answered quickly, yet late by the grantor's clock: the
			// offset is wrong (a clock stepped), not the request delayed.
			// The next request goes without a deadline and measures anew.
			// A slow round trip says the request really waited: the offset
			// stands, and later requests keep their deadlines.
			c.clock.DistrustOffset()
		}
		return body.Err()
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("%w: %s: bad reply: %v", api.ErrInternal, subject, err)
	}
	return nil
}
