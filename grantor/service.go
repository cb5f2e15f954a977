package grantor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
)

const instrumentationName = "github.com/leased/leased/grantor"

// Option configures [New].
type Option func(*Service) error

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option {
	return func(s *Service) error { s.log = l; return nil }
}

// WithTracerProvider sets where server spans go. Default: the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Service) error { s.tracer = tp.Tracer(instrumentationName); return nil }
}

// WithNodeName names this grantor node in the service's metadata (what
// `leased status` shows). Default: none.
func WithNodeName(name string) Option {
	return func(s *Service) error { s.node = name; return nil }
}

// WithRequestTimeout bounds each request's work at the bucket. Default 5 s.
func WithRequestTimeout(d time.Duration) Option {
	return func(s *Service) error {
		if d <= 0 {
			return fmt.Errorf("%w: request timeout %v", ErrConfig, d)
		}
		s.timeout = d
		return nil
	}
}

// Service is the lease service on NATS request/reply.
type Service struct {
	store   *kvlease.Store
	nc      *nats.Conn
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	timeout time.Duration
	node    string

	svc      micro.Service
	sem      chan struct{}
	inflight sync.WaitGroup
	holders  holderIndex
	watcher  *kvlease.Watcher
	handlers map[string]handlerFunc
}

type handlerFunc func(ctx context.Context, data []byte) (any, error)

// New returns a service for store, answering on nc. The store must have
// been opened with cfg.StoreOptions() so that store and service agree on
// durations and margin.
func New(store *kvlease.Store, nc *nats.Conn, cfg Config, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		store:   store,
		nc:      nc,
		cfg:     cfg,
		log:     slog.New(slog.DiscardHandler),
		tracer:  otel.GetTracerProvider().Tracer(instrumentationName),
		timeout: 5 * time.Second,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		holders: holderIndex{byName: map[string]string{}, rev: map[string]uint64{}, count: map[string]int{}},
	}
	for _, opt := range opts {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	s.handlers = map[string]handlerFunc{
		"grant":   s.grant,
		"renew":   s.renew,
		"release": s.release,
		"get":     s.get,
		"list":    s.list,
	}
	return s, nil
}

// Start registers the service on NATS. It first replays the bucket to count
// leases per holder (for the per-holder limit) and keeps counting from the
// bucket's stream until Stop.
func (s *Service) Start(ctx context.Context) error {
	w, err := s.store.Watch(context.WithoutCancel(ctx), "")
	if err != nil {
		return err
	}
	go s.holders.follow(w)
	select {
	case <-w.Synced():
	case <-ctx.Done():
		w.Stop()
		return ctx.Err()
	}
	s.watcher = w

	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        ServiceName,
		Version:     ServiceVersion,
		Description: "leased: leases that lapse on their own (docs/api.md)",
		Metadata:    map[string]string{"bucket": s.store.Bucket(), "node": s.node, "nats_url": s.nc.ConnectedUrlRedacted()},
	})
	if err != nil {
		w.Stop()
		return fmt.Errorf("grantor: add service: %w", err)
	}
	s.svc = svc
	g := svc.AddGroup("lease.v1")
	for _, verb := range []string{"grant", "renew", "release", "get", "list"} {
		if err := g.AddEndpoint(verb, s.handler()); err != nil {
			return s.fail(err)
		}
	}
	// The catch-all sees a copy of every lease.v1 request (its own queue
	// group) and answers only those no other endpoint takes.
	if err := svc.AddEndpoint("unknown", micro.HandlerFunc(s.unknownVerb), micro.WithEndpointSubject("lease.v1.>"),
		micro.WithEndpointQueueGroup("leased-unknown"),
		micro.WithEndpointMetadata(map[string]string{"description": "answers unknown verbs with invalid_argument"})); err != nil {
		return s.fail(err)
	}
	if err := svc.AddEndpoint("revoke", s.handler(), micro.WithEndpointSubject(SubjectRevoke)); err != nil {
		return s.fail(err)
	}
	s.log.Info("lease service started", "service", ServiceName, "id", svc.Info().ID)
	return nil
}

func (s *Service) fail(err error) error {
	_ = s.svc.Stop()
	s.watcher.Stop()
	return fmt.Errorf("grantor: add endpoint: %w", err)
}

// Stop stops taking requests, waits for those in flight to be answered, and
// stops the holder index. It releases nothing: leases belong to holders.
func (s *Service) Stop() {
	if s.svc != nil {
		_ = s.svc.Stop() // drains the endpoint subscriptions
	}
	s.inflight.Wait()
	if s.watcher != nil {
		s.watcher.Stop()
	}
}

// handler answers each request on its own goroutine (bounded by
// MaxInFlight), because micro calls a handler for one request at a time per
// endpoint and one KV round trip per request would serialize all clients.
// Replies are published directly rather than through micro.Request, whose
// error bookkeeping is not safe once the handler has returned.
func (s *Service) handler() micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		subject, reply, data := req.Subject(), req.Reply(), req.Data()
		hdr := nats.Header(req.Headers())
		s.sem <- struct{}{}
		s.inflight.Add(1)
		go func() {
			defer func() { <-s.sem; s.inflight.Done() }()
			s.serve(subject, reply, hdr, data)
		}()
	})
}

func (s *Service) unknownVerb(req micro.Request) {
	subject := req.Subject()
	if _, known := s.handlers[strings.TrimPrefix(subject, "lease.v1.")]; known {
		return // the verb's own endpoint answers
	}
	s.handler().Handle(req)
}

func (s *Service) serve(subject, reply string, hdr nats.Header, data []byte) {
	verb := subject[strings.LastIndexByte(subject, '.')+1:]
	ctx := telemetry.Extract(context.Background(), hdr)
	ctx, span := s.tracer.Start(ctx, "lease.v1."+verb, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(kvlease.AttrOutcome.String("")))
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	var resp any
	var err error
	fn, ok := s.handlers[verb]
	switch {
	case len(data) > s.cfg.MaxRequestBytes:
		err = fmt.Errorf("%w: request of %d bytes, limit %d", ErrTooLarge, len(data), s.cfg.MaxRequestBytes)
	case subject == SubjectRevoke:
		resp, err = s.revoke(ctx, data)
	case !ok || !strings.HasPrefix(subject, "lease.v1.") || strings.Count(subject, ".") != 2:
		err = fmt.Errorf("%w: unknown verb %q (have grant, renew, release, get, list)", ErrInvalidRequest, subject)
	default:
		resp, err = fn(ctx, data)
	}
	msg := &nats.Msg{Subject: reply}
	if err != nil {
		body := errorBody(verb, err)
		msg.Header = nats.Header{}
		msg.Header.Set(micro.ErrorCodeHeader, body.Code)
		msg.Header.Set(micro.ErrorHeader, body.Message)
		msg.Data, _ = json.Marshal(body)
		span.SetAttributes(kvlease.AttrOutcome.String(body.Code))
		span.SetStatus(codes.Error, body.Message)
		if body.Code == CodeInternal || body.Code == CodeUnavailable {
			s.log.Warn("request failed", "verb", verb, "code", body.Code, "err", err)
		}
	} else {
		msg.Data, _ = json.Marshal(resp)
		span.SetAttributes(kvlease.AttrOutcome.String("ok"))
	}
	if reply == "" {
		return
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("reply failed", "verb", verb, "err", err)
	}
}

// decode reads a JSON request strictly: unknown fields are errors, so a
// misspelt field is not silently ignored.
func decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidRequest)
	}
	return nil
}

func (s *Service) grant(ctx context.Context, data []byte) (any, error) {
	var req GrantRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	d := time.Duration(req.TTL)
	if d == 0 {
		d = s.cfg.DefaultDuration
	}
	if err := s.checkAttributes(req.Attributes); err != nil {
		return nil, err
	}
	if n := s.holders.leases(req.Holder); s.cfg.MaxLeasesPerHolder > 0 && n >= s.cfg.MaxLeasesPerHolder {
		return nil, fmt.Errorf("%w: holder %q has %d leases, limit %d", ErrLimitExceeded, req.Holder, n, s.cfg.MaxLeasesPerHolder)
	}
	rec, err := s.store.Grant(ctx, kvlease.GrantRequest{
		Name: req.Name, Holder: req.Holder, Duration: d, Attributes: req.Attributes, Secret: newSecret(),
	})
	if err != nil {
		return nil, err
	}
	s.holders.set(rec.Name, rec.Holder, rec.Revision)
	return toWire(rec, time.Now()), nil
}

func (s *Service) renew(ctx context.Context, data []byte) (any, error) {
	var req RenewRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	rec, err := s.store.Renew(ctx, kvlease.RenewRequest{
		Name: req.Name, Holder: req.Holder, Token: kvlease.Token(req.Token), Revision: req.Revision,
		Duration: time.Duration(req.TTL), Secret: req.Secret,
	})
	if err != nil {
		return nil, err
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) release(ctx context.Context, data []byte) (any, error) {
	var req ReleaseRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	err := s.store.Release(ctx, kvlease.ReleaseRequest{
		Name: req.Name, Holder: req.Holder, Token: kvlease.Token(req.Token), Revision: req.Revision, Secret: req.Secret,
	})
	if err != nil {
		return nil, err
	}
	// The tombstone's revision is above req.Revision: anything at or
	// below it is older news.
	s.holders.set(req.Name, "", req.Revision+1)
	return struct{}{}, nil
}

func (s *Service) get(ctx context.Context, data []byte) (any, error) {
	var req GetRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	rec, err := s.store.Get(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) list(ctx context.Context, data []byte) (any, error) {
	var req ListRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	recs, err := s.store.List(ctx, req.Prefix)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := ListReply{Leases: make([]Lease, 0, len(recs))}
	for _, r := range recs {
		out.Leases = append(out.Leases, toWire(r, now))
	}
	return out, nil
}

func (s *Service) revoke(ctx context.Context, data []byte) (any, error) {
	var req RevokeRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.Reason == "" {
		req.Reason = "revoked by operator"
	}
	rec, err := s.store.Revoke(ctx, req.Name, req.Reason)
	if err != nil {
		return nil, err
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) checkAttributes(attrs map[string]string) error {
	if len(attrs) > s.cfg.MaxAttributes {
		return fmt.Errorf("%w: %d attributes, limit %d", ErrTooLarge, len(attrs), s.cfg.MaxAttributes)
	}
	n := 0
	for k, v := range attrs {
		if k == "" {
			return fmt.Errorf("%w: empty attribute key", ErrInvalidRequest)
		}
		n += len(k) + len(v)
	}
	if n > s.cfg.MaxAttributeBytes {
		return fmt.Errorf("%w: attributes of %d bytes, limit %d", ErrTooLarge, n, s.cfg.MaxAttributeBytes)
	}
	return nil
}

// newSecret returns 128 random bits, hex-encoded.
func newSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// holderIndex counts live leases per holder from the bucket's events.
type holderIndex struct {
	mu     sync.Mutex
	byName map[string]string // lease → holder
	rev    map[string]uint64 // lease → revision of the newest change applied
	count  map[string]int    // holder → live leases
}

// follow applies the bucket's events. The service also applies its own
// grants and releases at once (set), so that a holder cannot outrun the
// stream; both are idempotent, and a late event is corrected by the next.
func (h *holderIndex) follow(w *kvlease.Watcher) {
	for ev := range w.Events() {
		holder := ev.Holder
		if ev.Type.Ends() {
			holder = ""
		}
		h.set(ev.Name, holder, ev.Revision)
	}
}

// set records that name is held by holder ("" for nobody) as of revision
// rev, unless a newer change is already recorded.
func (h *holderIndex) set(name, holder string, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev < h.rev[name] {
		return
	}
	h.rev[name] = rev
	if old, ok := h.byName[name]; ok {
		h.count[old]--
		if h.count[old] == 0 {
			delete(h.count, old)
		}
		delete(h.byName, name)
	}
	if holder != "" {
		h.byName[name] = holder
		h.count[holder]++
	}
}

func (h *holderIndex) leases(holder string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count[holder]
}
