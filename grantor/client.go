package grantor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
)

// Client calls the lease service over NATS. It implements
// [kvlease.Grantor]: pass it to [kvlease.Acquire] and [kvlease.Keep].
// Errors are kvlease's ([kvlease.ErrHeld], [kvlease.ErrNotHolder], …),
// wrapped in a [*ServiceError] that carries the wire code.
type Client struct {
	nc      *nats.Conn
	tp      trace.TracerProvider
	tracer  trace.Tracer
	timeout time.Duration
	clock   ClockEstimator
	metrics *telemetry.Metrics
}

// WithClientMeterProvider records the estimated clock offset to the grantor
// (leased.clock.offset) and its error bound (leased.clock.margin) on mp.
func WithClientMeterProvider(mp metric.MeterProvider) ClientOption {
	return func(c *Client) {
		if m, err := telemetry.NewMetrics(mp); err == nil {
			c.metrics = m
		}
	}
}

// Clock returns the estimate of the grantor's clock against this one, fed
// by every reply that carries the server's time. Pass Clock().Exceeds to
// kvlease.WithClockGuard to refuse to act when the rates drift apart.
func (c *Client) Clock() *ClockEstimator { return &c.clock }

var _ kvlease.Grantor = (*Client)(nil)

// ClientOption configures [NewClient].
type ClientOption func(*Client)

// WithClientTracerProvider sets where client spans go. Default: global.
func WithClientTracerProvider(tp trace.TracerProvider) ClientOption {
	return func(c *Client) { c.tp, c.tracer = tp, tp.Tracer(instrumentationName) }
}

// TracerProvider returns where the client's spans go. A [kvlease.Lease]
// acquired through the client sends its holder spans there too.
func (c *Client) TracerProvider() trace.TracerProvider { return c.tp }

// WithTimeout bounds a request when its context has no deadline. Default 5 s.
func WithTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// NewClient returns a client that sends requests on nc.
func NewClient(nc *nats.Conn, opts ...ClientOption) *Client {
	tp := otel.GetTracerProvider()
	c := &Client{nc: nc, tp: tp, tracer: tp.Tracer(instrumentationName), timeout: 5 * time.Second}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Grant asks for a tenure; the returned record carries the secret that
// renewals and releases must present. req.Duration is required, as for
// kvlease.Store.Grant: zero is out of range, not "the service's default".
func (c *Client) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	var out Lease
	defer c.observe(time.Now(), &out)
	err := c.call(ctx, SubjectGrant, GrantRequest{Name: req.Name, Holder: req.Holder, TTL: TTL(req.Duration),
		Attributes: req.Attributes}, &out)
	var held *kvlease.HeldError
	if errors.As(err, &held) {
		held.Name = req.Name
	}
	return fromWire(out), err
}

// Renew extends a tenure.
func (c *Client) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	var out Lease
	defer c.observe(time.Now(), &out)
	wire := RenewRequest{Name: req.Name, Holder: req.Holder, Token: uint64(req.Token), Revision: req.Revision, Secret: req.Secret}
	if req.Duration != 0 { // zero keeps the tenure's duration, as in kvlease.Store.Renew
		wire.TTL = TTL(req.Duration)
	}
	err := c.call(ctx, SubjectRenew, wire, &out)
	nameStale(err, req.Name)
	return fromWire(out), err
}

// Release ends a tenure.
func (c *Client) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	err := c.call(ctx, SubjectRelease, ReleaseRequest{Name: req.Name, Holder: req.Holder, Token: uint64(req.Token),
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
func (c *Client) Get(ctx context.Context, name string) (Lease, error) {
	var out Lease
	err := c.call(ctx, SubjectGet, GetRequest{Name: name}, &out)
	return out, err
}

// List returns the live leases whose names start with prefix.
func (c *Client) List(ctx context.Context, prefix string) ([]Lease, error) {
	var out ListReply
	err := c.call(ctx, SubjectList, ListRequest{Prefix: prefix}, &out)
	return out.Leases, err
}

// Revoke ends a lease regardless of its holder (an operator's request; NATS
// permissions may refuse it, which shows as [kvlease.ErrUnavailable] with
// no responders, or as a permissions error).
func (c *Client) Revoke(ctx context.Context, name, reason string) (Lease, error) {
	var out Lease
	err := c.call(ctx, SubjectRevoke, RevokeRequest{Name: name, Reason: reason}, &out)
	return out, err
}

// observe feeds the clock estimate with a reply's server time.
func (c *Client) observe(sent time.Time, l *Lease) {
	c.clock.ObserveNode(l.Node, sent, time.Now(), l.ServerTime)
	if offset, bound, _, _, ok := c.clock.Estimate(); ok || bound > 0 {
		c.metrics.ClockOffset(context.Background(), "grantor", offset, bound)
	}
}

// call sends one request and decodes the reply or the error.
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
		return fmt.Errorf("grantor: encode %s: %w", subject, err)
	}
	msg := &nats.Msg{Subject: subject, Data: data, Header: telemetry.Inject(ctx, nil)}
	if dl, ok := ctx.Deadline(); ok {
		msg.Header.Set(HeaderTimeout, strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10))
	}
	if !c.nc.IsConnected() {
		// A request published while reconnecting is buffered and sent on
		// reconnect, maybe after the holder's deadline (docs/safety.md).
		return fmt.Errorf("%w: %s: not connected to NATS (%v)", kvlease.ErrUnavailable, subject, c.nc.Status())
	}
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", kvlease.ErrUnavailable, subject, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		body := ErrorBody{Code: code, Message: reply.Header.Get(micro.ErrorHeader)}
		_ = json.Unmarshal(reply.Data, &body) // the body adds holder and token for "held"
		return body.Err()
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("%w: %s: bad reply: %v", ErrInternal, subject, err)
	}
	return nil
}
