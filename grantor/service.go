package grantor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
)

const instrumentationName = "github.com/leased/leased/grantor"

// Option configures [New].
type Option func(*Service) error

// WithLogger sets the logger. Default: discard. A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return func(s *Service) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrConfig)
		}
		s.log = l
		return nil
	}
}

// WithTracerProvider sets where server spans go. Default: the global
// provider. A nil provider is an error.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(s *Service) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrConfig)
		}
		s.tracer = tp.Tracer(instrumentationName)
		return nil
	}
}

// WithNodeName names this grantor node in the service's metadata (what
// `leased status` shows). Default: none.
func WithNodeName(name string) Option {
	return func(s *Service) error { s.node = name; return nil }
}

// WithMeterProvider sets where the grantor's metrics go: requests by
// operation and outcome, their latency, the changes seen on the bucket (by
// event), live leases, ownership changes and flapping. Default: the global
// provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(s *Service) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrConfig)
		}
		s.mp = mp
		return nil
	}
}

// WithMetricNamePrefixes labels the ownership changes of leases whose names
// start with one of prefixes with lease.name (one series per such lease).
// Without it no metric carries a lease name, so the number of series does
// not grow with the number of leases. Empty prefixes are refused.
func WithMetricNamePrefixes(prefixes ...string) Option {
	return func(s *Service) error {
		for _, p := range prefixes {
			if p == "" {
				return fmt.Errorf("%w: empty metric name prefix (it would label every lease)", ErrConfig)
			}
			if err := kvlease.ValidatePrefix(p); err != nil {
				return fmt.Errorf("%w: metric name prefix: no lease name begins with it: %w", ErrConfig, err)
			}
		}
		s.namePrefixes = append(s.namePrefixes, prefixes...)
		return nil
	}
}

// WithFlapping sets when a lease counts as flapping: more than threshold
// new tenures within window, whoever their holders. Defaults: telemetry.DefaultFlapWindow,
// DefaultFlapThreshold; zero keeps a default, a negative value is an error.
func WithFlapping(window time.Duration, threshold int) Option {
	return func(s *Service) error {
		if window < 0 || threshold < 0 {
			return fmt.Errorf("%w: flapping window %v and threshold %d must not be negative", ErrConfig, window, threshold)
		}
		s.flaps = telemetry.NewFlapDetector(window, threshold)
		return nil
	}
}

// MaxRequestTimeout bounds the work of any one request, whatever its
// caller says it waits: each holds one of [Config.MaxInFlight] slots.
const MaxRequestTimeout = time.Minute

// WithRequestTimeout bounds the work at the bucket of a request whose
// caller does not say how long it waits (no Leased-Timeout-Ms header).
// Default 5 s. A caller that says is given what it asked for, up to
// [MaxRequestTimeout].
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
	failed  chan error // Failed's
	store   *kvlease.Store
	nc      *nats.Conn
	cfg     Config
	log     *slog.Logger
	tracer  trace.Tracer
	timeout time.Duration
	node    string

	extensions []Extension
	started    []Extension // those Start has started, for Stop
	metrics    *telemetry.Metrics
	// flaps counts the new tenures this node's watch sees, on every node
	// (for the flapping mark in grant spans and list replies); the
	// observer keeps a detector of its own for what it reports.
	flaps           *telemetry.FlapDetector
	retention       time.Duration // of the history stream; 0: the default
	historyMaxBytes int64         // of the history stream; 0: the stream's bound
	obs             *observer     // set by Start
	// instance and predecessor are WithSuccession's.
	instance, predecessor string
	// onObserved, if set (tests), is called by the observer with the
	// revision of each change of the bucket its watch has handled.
	onObserved func(rev uint64)
	// overdueSweep is how often the observer looks for tenures the server
	// kept past their TTL (tests shorten it).
	overdueSweep time.Duration
	// onFeed, if set (tests), is called when the observer moves to the
	// service's watch (true) and when the feed cuts it off (false).
	onFeed func(on bool)
	// historyLinger, if set (tests lengthen it), is how long the
	// observer's records wait for more (default historyLinger); onReported,
	// if set, is called with the revision of each change it has queued a
	// record of.
	historyLinger time.Duration
	onReported    func(rev uint64)
	// onEndChecked, if set (tests), is called by the observer with each
	// tenure its replay showed live once it has been checked against the
	// history (endEndedAgain), and whether it was ended, or with the
	// check's error.
	onEndChecked func(rec kvlease.Record, ended bool, err error)
	// onVanished, if set (tests), is called by the observer with the ends
	// of tenures that ended unobserved it found at a takeover, before it
	// queues them (sent false), and with those it queued (sent true).
	onVanished func(ends []history.Record, sent bool)

	mp           metric.MeterProvider
	namePrefixes []string
	stats        endpointStats
	slow         slowLog
	full         fullLog
	flapLog      telemetry.LogLimit // "lease is flapping"
	replyLog     telemetry.LogLimit // "dropped a request whose reply subject is not an inbox"
	lateLog      telemetry.LogLimit // "dropped a request that arrived after its caller's deadline"

	svc         micro.Service
	sem         chan struct{}
	work        chan request  // to an idle worker (unbuffered)
	quit        chan struct{} // closed by Stop: idle workers exit
	quitOnce    sync.Once
	workers     sync.WaitGroup
	mu          sync.Mutex // guards stopping, startedOnce and inflight.Add
	stopping    bool
	startedOnce bool // Start was called
	inflight    sync.WaitGroup
	holders     holderIndex
	watcher     *kvlease.Watcher
	feed        feed // watcher's events, to the observer
	handlers    map[string]Handler
	apis        []string // the API prefixes the catch-alls answer: lease.v1, …
}

// New returns a service for store, answering on nc. The durations a lease
// may have and the grantor margin are the store's, set where it is opened
// ([kvlease.WithDurationRange], [kvlease.WithGrantorMargin]); cfg is the
// rest of the policy, and its DefaultDuration must lie in the store's
// range ([Config.ValidateFor]). A nil store, a bad cfg or a bad option is
// an error wrapping [ErrConfig].
func New(store *kvlease.Store, nc *nats.Conn, cfg Config, opts ...Option) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Service{
		failed:  make(chan error, 1),
		store:   store,
		nc:      nc,
		cfg:     cfg,
		log:     slog.New(slog.DiscardHandler),
		tracer:  otel.GetTracerProvider().Tracer(instrumentationName),
		timeout: 5 * time.Second,
		sem:     make(chan struct{}, cfg.MaxInFlight),
		work:    make(chan request),
		quit:    make(chan struct{}),
		holders: newHolderIndex(),
		flaps:   telemetry.NewFlapDetector(0, 0),
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrConfig)
		}
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrConfig)
	}
	if nc == nil { // Start panicked on it (found by an outside client)
		return nil, fmt.Errorf("%w: nil NATS connection", ErrConfig)
	}
	if err := cfg.ValidateFor(store.DurationRange()); err != nil {
		return nil, err
	}
	if s.mp == nil {
		s.mp = otel.GetMeterProvider()
	}
	m, err := telemetry.NewMetrics(s.mp, telemetry.WithLeaseNamePrefixes(s.namePrefixes...))
	if err != nil {
		return nil, fmt.Errorf("%w: metrics: %v", ErrConfig, err)
	}
	s.metrics = m
	s.handlers = map[string]Handler{
		api.SubjectGrant:   s.grant,
		api.SubjectRenew:   s.renew,
		api.SubjectRelease: s.release,
		api.SubjectGet:     s.get,
		api.SubjectList:    s.list,
		api.SubjectRevoke:  s.revoke,
	}
	s.apis = []string{"lease.v1"}
	for _, ext := range s.extensions {
		for subject, h := range ext.Endpoints(extensionLeases{s}) {
			if _, dup := s.handlers[subject]; dup || h == nil {
				return nil, fmt.Errorf("%w: extension endpoint %q is taken or has no handler", ErrConfig, subject)
			}
			s.handlers[subject] = h
			if i := strings.LastIndexByte(subject, '.'); i > 0 && !slices.Contains(s.apis, subject[:i]) {
				s.apis = append(s.apis, subject[:i])
			}
		}
	}
	return s, nil
}

// syncReportEvery is how often Start says it still waits for the bucket's
// replay: after a kill of a whole cluster every node once waited 50 s
// with nothing in its log after one failed attempt to start its watch
// (README, Reliability).
const syncReportEvery = 10 * time.Second

// awaitSync waits until the watch has replayed the bucket (synced closes),
// ctx ends, or the watch ends first (ended closes; cause says why, nil if
// it was stopped), saying in the log every syncReportEvery that it still
// waits. A watch that ends before its replay never catches up: its
// follower took the stream for gone (a node without its copy of it yet
// after a kill of the whole cluster) or replaced, or the connection
// closed; waited for, Start waited until ctx ended, the node serving
// nothing (found in review).
func (s *Service) awaitSync(ctx context.Context, synced, ended <-chan struct{}, cause func() error) error {
	tick := time.NewTicker(syncReportEvery)
	defer tick.Stop()
	for since := time.Now(); ; {
		select {
		case <-synced:
			return nil
		case <-ended:
			select {
			case <-synced: // caught up, then ended: the failure is Failed's
				return nil
			default:
			}
			if err := cause(); err != nil {
				return fmt.Errorf("the watch of the bucket ended before its replay caught up: %w", err)
			}
			return fmt.Errorf("%w: the watch of the bucket ended before its replay caught up", kvlease.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			s.log.Warn("the bucket's replay has not caught up yet", "waited", time.Since(since).Round(time.Second))
		}
	}
}

// ErrStarted: Start was called on a service already started, or stopped.
// A service starts once; make a new one with [New] to start again.
var ErrStarted = errors.New("grantor: the service starts once (make a new one)")

// Start registers the service on NATS. It first replays the bucket to count
// leases per holder (for the per-holder limit) and keeps counting from the
// bucket's stream until Stop; then it starts the extensions, in the order
// given. It refuses to serve beside a lease service of another bucket on
// its NATS account ([ErrOtherBucket]), which it listens for twice 100 ms:
// as it begins, and once it answers the others' INFO itself, before it
// serves any request (two that start at once both refuse). A service
// starts once ([ErrStarted]).
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	again := s.startedOnce || s.stopping
	s.startedOnce = true
	s.mu.Unlock()
	if again {
		// Started after Stop it returned nil and answered every request
		// "shutting down", taking a share of them (found by an outside
		// client).
		return ErrStarted
	}
	// First, before anything that acts (its observer would campaign and
	// publish change events; found in review).
	if err := s.checkBuckets(""); err != nil {
		return err
	}
	// The watch lives until stopped, not until ctx ends; ctx bounds the
	// retries while JetStream is unavailable: a node that has just rejoined
	// its cluster can open the bucket and still fail to create a consumer
	// for some seconds while its stream catches up.
	w, err := kvlease.RetryUnavailable(ctx, 2*time.Second, func(err error) {
		s.log.Info("waiting for JetStream to start a watch", "prefix", "", "err", err)
	}, func() (*kvlease.Watcher, error) {
		return s.store.Watch(context.WithoutCancel(ctx), "", kvlease.ReportFrees())
	})
	if err != nil {
		return err
	}
	ended := make(chan struct{}) // the watch has ended
	go func() {
		s.holders.follow(w, s.log, s.observe,
			func(n int) { s.metrics.LiveLeases(context.Background(), int64(n)) }, s.feed.pass)
		close(ended)
		s.feed.close()
		// Err is nil if the watch was stopped. Otherwise the bucket was
		// made anew, or is gone (its stream missing, the bucket deleted),
		// or the connection closed: either way the index and the
		// observer's feed have ended for good. A bucket deleted and left
		// missing for seconds ended the watch with ErrUnavailable, and the
		// service ran on without them, answering every list
		// "unavailable", and then served the bucket a restarted node made
		// anew with the old one's index (found deleting the bucket under
		// a cluster).
		if err := w.Err(); err != nil {
			s.failed <- err // buffered: the first and only
		}
	}()
	if err := s.awaitSync(ctx, w.Synced(), ended, w.Err); err != nil {
		w.Stop()
		return err
	}
	s.watcher = w
	if err := s.startObserver(ctx); err != nil {
		s.undo()
		return err
	}
	for _, ext := range s.extensions {
		if err := ext.Start(ctx); err != nil {
			s.undo() // the observer too: it ran on (found in review)
			return err
		}
		s.started = append(s.started, ext)
	}

	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        api.ServiceName,
		Version:     api.ServiceVersion,
		Description: "leased: leases that lapse on their own (docs/api.md)",
		Metadata:    s.infoMetadata(),
		// micro counts an error only if it is answered before the handler
		// returns; ours answer from their own goroutines, so the service's
		// own counts go in each endpoint's stats data.
		StatsHandler: func(e *micro.Endpoint) any { return s.stats.of(e.Subject) },
	})
	if err != nil {
		s.undo()
		return fmt.Errorf("grantor: add service: %w", err)
	}
	s.svc = svc
	// Once more, before any endpoint: a service of another bucket that
	// starts at the same time answers INFO now, as this one does, so each
	// sees the other and neither serves a request. Checked after the
	// endpoints, both served for some 200 ms, the window of a lease
	// granted twice (found by an outside client).
	if err := s.nc.Flush(); err != nil {
		s.undo()
		return fmt.Errorf("grantor: announce the service: %w", err)
	}
	if err := s.checkBuckets(svc.Info().ID); err != nil {
		s.undo()
		return err
	}
	for _, subject := range slices.Sorted(maps.Keys(s.handlers)) {
		// lease.v1.grant → lease-grant, svc.v1.discover → svc-discover
		name := strings.ReplaceAll(strings.ReplaceAll(subject, ".v1.", "-"), ".", "-")
		if err := svc.AddEndpoint(name, s.handler(), micro.WithEndpointSubject(subject)); err != nil {
			return s.fail(err)
		}
	}
	// The catch-alls answer the verbs no other endpoint serves. They are in
	// the verbs' own queue group: NATS delivers a request to one member of
	// a queue group whichever of its subscriptions match, so a known verb
	// reaches either its endpoint or a catch-all, which serves it the
	// same, and no request arrives twice (a catch-all in a group of its own
	// received a copy of every request of its API).
	for _, prefix := range s.apis {
		if err := svc.AddEndpoint("unknown-"+strings.TrimSuffix(prefix, ".v1"), s.handler(), micro.WithEndpointSubject(prefix+".>"),
			micro.WithEndpointMetadata(map[string]string{"description": "answers unknown verbs with invalid_argument; serves any verb it is given"})); err != nil {
			return s.fail(err)
		}
	}
	// Make sure the server has our subscriptions before we say we serve.
	if err := s.nc.Flush(); err != nil {
		s.undo()
		return fmt.Errorf("grantor: subscribe the endpoints: %w", err)
	}
	s.log.Info("lease service started", "service", api.ServiceName, "id", svc.Info().ID)
	return nil
}

func (s *Service) fail(err error) error {
	s.undo()
	return fmt.Errorf("grantor: add endpoint: %w", err)
}

// undo stops what a Start that fails has started: the service, the
// observer, the watch and the extensions.
func (s *Service) undo() {
	if s.svc != nil {
		_ = s.svc.Stop()
	}
	if s.obs != nil {
		s.obs.halt()
	}
	if s.watcher != nil {
		s.watcher.Stop()
	}
	s.stopExtensions()
}

// stopExtensions stops the started extensions, last first.
func (s *Service) stopExtensions() {
	for _, ext := range slices.Backward(s.started) {
		ext.Stop()
	}
	s.started = nil
}

// Failed delivers an error if the service can no longer answer truly and
// must be stopped: its watch of the bucket ended. The bucket was deleted
// and made anew under it ([kvlease.ErrBucketReplaced]; a NATS server
// restarted on an empty store): its index of the old bucket's leases
// answered lists and counts with leases that no longer existed, and its
// reads stayed unavailable (found by an outside client). Or the bucket
// was deleted and stayed missing for seconds ([kvlease.ErrUnavailable]),
// or the connection closed: its index and its observer's feed had ended
// for good. Restarted, a grantor serves the new bucket, whose tokens
// began again unless its creator gave a first token (docs/safety.md).
func (s *Service) Failed() <-chan error { return s.failed }

// Stop stops taking requests, waits for those in flight to be answered, and
// stops its request workers, the holder index and the extensions. Requests that still arrive
// while the endpoints drain are answered "unavailable" at once, so that
// clients retry on another node instead of waiting. It releases nothing:
// leases belong to holders.
func (s *Service) Stop() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	if s.svc != nil {
		_ = s.svc.Stop() // drains the endpoint subscriptions (asynchronously)
	}
	s.inflight.Wait()
	// No request is served now, nor handed to a worker: the idle ones
	// would wait out workerIdle after Stop returned (found by an outside
	// client counting goroutines after Stop).
	s.quitOnce.Do(func() { close(s.quit) })
	s.workers.Wait()
	if s.obs != nil {
		s.obs.halt()
		// The change events it published last are buffered in the
		// connection, which its owner may close next.
		_ = s.nc.FlushTimeout(time.Second)
	}
	if s.watcher != nil {
		s.watcher.Stop()
	}
	s.stopExtensions()
}

// handler answers each request on a worker goroutine of its own (at most
// MaxInFlight at once), because micro calls a handler for one request at a
// time per endpoint and one KV round trip per request would serialize all
// clients. Replies are published directly rather than through
// micro.Request, whose error bookkeeping is not safe once the handler has
// returned.
func (s *Service) handler() micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		subject, reply, data := req.Subject(), req.Reply(), req.Data()
		hdr := nats.Header(req.Headers())
		if reply == "" {
			return // no one would receive the reply (nor a grant's secret)
		}
		if !api.ReplySubjectOK(reply, s.cfg.ReplyPrefixes) {
			// The reply would be published, as this node's user, on a
			// subject that is data: the bucket's, the history's, the
			// service's own, another application's (outside clients wrote
			// a reply into $KV.leases.<name>, ending a tenure without its
			// secret, and into another application's stream).
			if skipped, ok := s.replyLog.Allow(); ok {
				if strings.HasPrefix(reply, api.ServiceImportReplyPrefix) {
					// It said only "not an inbox" (found by an outside
					// client putting leased in an account of its own).
					s.log.Warn("dropped a request whose reply subject is not an inbox: it came through a service import from another account, "+
						"whose replies nats-server routes through "+api.ServiceImportReplyPrefix+"…; to answer those, serve "+
						"--reply-prefixes _INBOX,"+api.ServiceImportReplyPrefix+" (docs/api.md, Revoke)",
						"subject", subject, "reply", reply, "others_not_logged", skipped)
				} else {
					s.log.Warn("dropped a request whose reply subject is not an inbox (serve --reply-prefixes)",
						"subject", subject, "reply", reply, "others_not_logged", skipped)
				}
			}
			s.count(context.Background(), subject, api.CodeInvalidArgument, 0)
			return
		}
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			s.reply(reply, "", nil, fmt.Errorf("%w: this grantor node is shutting down", kvlease.ErrUnavailable),
				func(code string) { s.count(context.Background(), subject, code, 0) })
			return
		}
		s.inflight.Add(1)
		s.mu.Unlock()
		s.sem <- struct{}{}
		r := request{subject, reply, hdr, data}
		select {
		case s.work <- r:
		default:
			s.workers.Add(1) // before inflight.Done, which Stop waits for
			go s.worker(r)
		}
	})
}

// request is one request for a worker.
type request struct {
	subject, reply string
	hdr            nats.Header
	data           []byte
}

// slowRequest is how long a request may take before the service logs it.
const slowRequest = time.Second

// slowLog logs slow requests, as etcd's "request took too long" does:
// where the time went is in the request's span; this says that it went,
// before the reply does. At most one line a second.
type slowLog struct{ telemetry.LogLimit }

func (l *slowLog) note(log *slog.Logger, subject, code string, took time.Duration) {
	if skipped, ok := l.Allow(); ok {
		log.Warn("slow request", "subject", subject, "code", code, "took", took.Round(time.Millisecond).String(),
			"others_not_logged", skipped)
	}
}

// fullLog says, at most once a second, that JetStream refuses writes for
// its storage limit: on one server every renewal then fails until an
// operator acts; in a cluster the refusing leader steps down, and another
// may take the writes.
type fullLog struct{ telemetry.LogLimit }

func (l *fullLog) note(log *slog.Logger, err error) {
	if skipped, ok := l.Allow(); ok {
		log.Error("the NATS server's storage is full: a write was refused; on one server no lease can be granted, renewed or released "+
			"until room is made, in a cluster the stream's leader steps down for another "+
			"(raise JetStream's max_file_store or the account's limit, or free the disk)", "err", err, "others_not_logged", skipped)
	}
}

// workerIdle is how long a worker waits for another request before it
// exits.
const workerIdle = 10 * time.Second

// worker serves r, then the requests handed to it, until none comes for
// workerIdle. Workers outlive their requests so that the stacks they have
// grown are reused: a goroutine per request started small and grew its
// stack on every request, about 5% of a loaded grantor's CPU. Each request
// holds its MaxInFlight slot while served, so at most MaxInFlight workers
// are busy; idle ones are the few that the load left. Stop ends them.
func (s *Service) worker(r request) {
	defer s.workers.Done()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		s.serve(r.subject, r.reply, r.hdr, r.data)
		<-s.sem
		s.inflight.Done()
		idle.Reset(workerIdle)
		select {
		case r = <-s.work:
		case <-idle.C:
			return
		case <-s.quit:
			return
		}
	}
}

// headerMS reads header name of hdr, a count of milliseconds: 0 if it is
// absent, an error (invalid_argument) if it is not a positive integer,
// empty included (taken as absent, it turned the too-late guard off
// unawares; found by an outside client).
func headerMS(hdr nats.Header, name string) (int64, error) {
	// Any case: a client that lower-cased its headers (as W3C trace
	// context asks) turned the too-late guard off unawares (found by an
	// outside client).
	v, ok := telemetry.LookupHeader(hdr, name)
	if !ok {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-") {
		// A positive count too large for 64 bits is a very long wait or a
		// far deadline, capped as any long one is (it was refused; found
		// by an outside client).
		return math.MaxInt64, nil
	}
	if err != nil || ms <= 0 {
		return 0, fmt.Errorf("%w: header %s %q: want a positive count of milliseconds", api.ErrInvalidRequest, name, v)
	}
	return ms, nil
}

func (s *Service) serve(subject, reply string, hdr nats.Header, data []byte) {
	start := time.Now()
	verb := subject[strings.LastIndexByte(subject, '.')+1:]
	ctx := telemetry.Extract(context.Background(), hdr)
	ctx, span := s.tracer.Start(ctx, s.endpointOf(subject), trace.WithSpanKind(trace.SpanKindServer))
	defer span.End()
	// Work as long as the caller waits, and no longer: a renewal that
	// lands after the holder gave up would only make its retry fail as a
	// stale revision, and a list cut short of the caller's own timeout
	// fails for nothing.
	timeout := s.timeout
	timeoutMS, badTimeout := headerMS(hdr, api.HeaderTimeout)
	deadlineMS, badDeadline := headerMS(hdr, api.HeaderDeadline)
	if ms := timeoutMS; ms > 0 {
		// Compared in milliseconds: a huge value must not wrap around.
		timeout = time.Duration(min(ms, MaxRequestTimeout.Milliseconds())) * time.Millisecond
	}
	late := time.Duration(0)
	if ms := deadlineMS; ms > 0 {
		// Past the caller's deadline (plus, but for a renewal, a slack for
		// the clocks of grantor nodes, which differ a little): it has given
		// up.
		slack := api.DeadlineSlack
		if subject == api.SubjectRenew {
			slack = 0
		}
		left := time.UnixMilli(ms).Add(slack).Sub(start)
		timeout = min(timeout, max(left, 0))
		late = -left
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	var resp any
	var err error
	fn, ok := s.handlers[subject]
	switch {
	case badTimeout != nil || badDeadline != nil:
		// Not carried out as if it had none: a deadline the caller meant
		// to be kept would not be.
		err = errors.Join(badTimeout, badDeadline)
	case late > 0:
		// How late past the deadline itself, not past its slack (the
		// message said 250 ms less; found by an outside client).
		past := start.Sub(time.UnixMilli(deadlineMS)).Round(time.Millisecond)
		// At most a line a second: a node that resumes after a pause
		// finds every request it queued late, and any caller may send
		// them (a line for each of 5,000 in 0.2 s; found by an outside
		// client).
		if skipped, ok := s.lateLog.Allow(); ok {
			s.log.Info("dropped a request that arrived after its caller's deadline", "subject", subject, "late", past,
				"others_not_logged", skipped)
		}
		err = fmt.Errorf("%w (by %v); nothing was done", api.ErrTooLate, past)
	case len(data) > s.cfg.MaxRequestBytes:
		err = fmt.Errorf("%w: request of %d bytes, limit %d", api.ErrTooLarge, len(data), s.cfg.MaxRequestBytes)
	case !ok:
		err = fmt.Errorf("%w: unknown subject %q (see docs/api.md)", api.ErrInvalidRequest, subject)
	default:
		resp, err = fn(ctx, data)
	}
	code := s.reply(reply, verb, resp, err, func(code string) {
		took := time.Since(start)
		s.count(ctx, subject, code, took)
		if took > slowRequest {
			s.slow.note(s.log, subject, code, took)
		}
		if errors.Is(err, kvlease.ErrStoreFull) {
			s.full.note(s.log, err)
		}
	})
	span.SetAttributes(telemetry.AttrOutcome.String(code))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
}

// reply answers a request with resp, or with err's code and message, and
// returns the code ("ok" on success). It calls counted with the code before
// sending, so that whoever has seen the reply sees it counted.
func (s *Service) reply(to, verb string, resp any, err error, counted func(code string)) string {
	r := replies.Get().(*replyMsg)
	defer r.put()
	msg := &r.msg
	msg.Subject = to
	code := "ok"
	if err == nil {
		if l, ok := resp.(api.Lease); ok {
			l.Node = s.node // whose clock l.ServerTime is: clients estimate rates per node
			msg.Data, _ = l.AppendJSON(r.data[:0])
		} else {
			msg.Data, _ = json.Marshal(resp)
		}
	}
	r.set(api.HeaderServerTime, time.Now().Format(time.RFC3339Nano))
	r.set(api.HeaderNode, s.node)
	r.set(api.HeaderErrorCode, "")
	r.set(api.HeaderError, "")
	// The server's max_payload bounds the body and the headers together: a
	// body that fit alone, within the headers' hundred bytes of the limit,
	// failed to publish ("reply failed" in the log), and its caller waited
	// out its timeout and was told "unavailable" (found by an outside
	// client's discover, every time until the service's instances changed).
	if size := msg.Size() - len(msg.Subject) - len(msg.Reply); err == nil && size > int(s.nc.MaxPayload()) {
		// A discovery has no prefix to narrow: it told the client of
		// a large service to (found by an outside client).
		hint := "ask for smaller pages (limit) or narrow the prefix"
		if verb == "discover" {
			hint = "ask for smaller pages (limit)"
		}
		err = fmt.Errorf("%w: reply of %d bytes (with its headers) exceeds the server's max payload of %d; %s",
			api.ErrTooLarge, size, s.nc.MaxPayload(), hint)
	}
	if err != nil {
		body := api.ErrorBodyOf(verb, err)
		code = body.Code
		r.set(api.HeaderErrorCode, body.Code)
		r.set(api.HeaderError, body.Message)
		msg.Data, _ = json.Marshal(body)
		if body.Code == api.CodeInternal {
			s.log.Warn("request failed", "verb", verb, "code", body.Code, "err", err)
		}
	}
	counted(code)
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("reply failed", "verb", verb, "err", err)
	}
	return code
}

// replyMsg is a reply's message and lease buffer, reused: nats.go has
// copied both into its write buffer once PublishMsg returns. Allocating
// them for every reply was about 6% of the bytes a renewal allocated
// (BenchmarkServiceRenew).
type replyMsg struct {
	msg  nats.Msg
	data []byte // a lease's JSON
}

var replies = sync.Pool{New: func() any {
	return &replyMsg{msg: nats.Msg{Header: make(nats.Header, 4)}, data: make([]byte, 0, 512)}
}}

// set sets header k to v, reusing its value slice; "" removes it.
func (r *replyMsg) set(k, v string) {
	switch vs := r.msg.Header[k]; {
	case v == "":
		delete(r.msg.Header, k)
	case len(vs) == 1:
		vs[0] = v
	default:
		r.msg.Header[k] = []string{v}
	}
}

// put returns r to the pool, keeping a body that outgrew its buffer (a
// lease with many attributes) as the buffer if it is at most 4 KiB.
func (r *replyMsg) put() {
	if d := r.msg.Data; cap(d) > cap(r.data) && cap(d) <= 4096 {
		r.data = d[:0]
	}
	r.msg.Data = nil
	replies.Put(r)
}

// count records an answered request in the metrics and the endpoint stats.
// The operation is the verb of a known subject, else "unknown": callers
// choose subjects, and a label must not take their values.
func (s *Service) count(ctx context.Context, subject, code string, d time.Duration) {
	op := "unknown"
	if _, ok := s.handlers[subject]; ok {
		op = subject[strings.LastIndexByte(subject, '.')+1:]
	}
	s.metrics.Request(ctx, op, code, d)
	s.stats.add(s.endpointOf(subject), code)
}

// endpointOf is the endpoint that answers subject: the subject itself if
// it is one of the service's, else the catch-all of its API ("….v1.>").
// Spans and endpoint stats are named by it: callers choose subjects, and
// names must not take their values.
func (s *Service) endpointOf(subject string) string {
	if _, ok := s.handlers[subject]; ok {
		return subject
	}
	if i := strings.Index(subject, ".v1."); i >= 0 {
		return subject[:i] + ".v1.>"
	}
	return "unknown"
}

// endpointStats holds api.EndpointStats by endpoint subject (a bounded set:
// the service's own endpoints).
type endpointStats struct {
	mu sync.Mutex
	by map[string]*api.EndpointStats
}

func (e *endpointStats) add(subject, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.by == nil {
		e.by = map[string]*api.EndpointStats{}
	}
	st := e.by[subject]
	if st == nil {
		st = &api.EndpointStats{}
		e.by[subject] = st
	}
	st.Requests++
	if code != "ok" {
		st.Errors++
		if st.ErrorsByCode == nil {
			st.ErrorsByCode = map[string]int64{}
		}
		st.ErrorsByCode[code]++
		st.LastError = code
	}
}

func (e *endpointStats) of(subject string) api.EndpointStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.by[subject]
	if st == nil {
		return api.EndpointStats{}
	}
	out := *st
	out.ErrorsByCode = maps.Clone(st.ErrorsByCode)
	return out
}

// observe notes each new tenure this node's watch sees, for the flapping
// mark of its own replies. Reporting changes is the observer's.
func (s *Service) observe(ev kvlease.Event) {
	if ev.Type == kvlease.EventGranted {
		s.flaps.GrantedTenure(ev.Name, uint64(ev.Token), ev.Time)
	}
}

func (s *Service) feedHook(on bool) {
	if s.onFeed != nil {
		s.onFeed(on)
	}
}

// publishChange reports a change the observer has recorded: a span, the
// ownership metric and an event for non-Go clients, e.g. a new leader:
// `nats sub 'lease.events.v1.leader.>'`. Only the cluster's observer
// reports, so each change is published once. kind is the change as the
// history has it (for an end, its cause); n and flapping are the
// observer's flap count for a grant.
func (s *Service) publishChange(ev kvlease.Event, kind string, n int, flapping bool) {
	switch {
	case ev.Type == kvlease.EventGranted:
		s.metrics.OwnershipChanged(context.Background(), ev.Name, flapping)
		if flapping {
			// At most a line a second: a lease granted anew in a loop
			// logged one per grant (found by an outside client).
			if skipped, ok := s.flapLog.Allow(); ok {
				s.log.Warn("lease is flapping", "lease", ev.Name, "holder", ev.Holder, "token", ev.Token,
					"changes", n, "window", s.flaps.Window, "others_not_logged", skipped)
			}
		}
		// Every new tenure is a span, linked to the grant, whoever
		// granted it (the service or a Go holder on the bucket): in Jaeger,
		// a flapping lease shows as a run of these with lease.flapping=true.
		opts := []trace.SpanStartOption{trace.WithTimestamp(ev.Time), trace.WithAttributes(
			telemetry.AttrName.String(ev.Name), telemetry.AttrHolder.String(ev.Holder),
			telemetry.AttrToken.Int64(int64(ev.Token)), telemetry.AttrFlapping.Bool(flapping),
			telemetry.AttrChangesInWindow.Int(n))}
		if ev.Record != nil {
			if sc := kvlease.SpanContextOfGrant(*ev.Record); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		_, span := s.tracer.Start(context.Background(), "lease.ownership_change", opts...)
		if flapping {
			span.AddEvent("lease.flapping", trace.WithAttributes(telemetry.AttrChangesInWindow.Int(n)))
		}
		span.End()
	case ev.Type.Ends():
		// The observed end of a tenure, linked to the grant that began it.
		opts := []trace.SpanStartOption{trace.WithTimestamp(ev.Time), trace.WithAttributes(
			telemetry.AttrName.String(ev.Name), telemetry.AttrHolder.String(ev.Holder),
			telemetry.AttrToken.Int64(int64(ev.Token)), telemetry.AttrCause.String(kind))}
		if ev.Record != nil {
			if sc := kvlease.SpanContextOfGrant(*ev.Record); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		_, span := s.tracer.Start(context.Background(), "lease."+kind, opts...)
		if ev.Reason != "" {
			span.SetAttributes(telemetry.AttrReason.String(ev.Reason))
		}
		span.End()
	}
	b, _ := json.Marshal(api.ChangeEvent{Type: ev.Type.String(), Name: ev.Name, Holder: ev.Holder, Token: uint64(ev.Token),
		Revision: ev.Revision, Time: ev.Time, Reason: ev.Reason})
	if err := s.nc.Publish(api.SubjectEvents+ev.Name, b); err != nil {
		s.log.Debug("publish change", "err", err)
	}
}

func (s *Service) grant(ctx context.Context, data []byte) (any, error) {
	var req api.GrantRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	return s.grantLease(ctx, req)
}

// grantLease grants req with the service's checks, limits and accounting.
func (s *Service) grantLease(ctx context.Context, req api.GrantRequest) (api.Lease, error) {
	if reserved(req.Name) {
		return api.Lease{}, reservedName()
	}
	d := s.cfg.DefaultDuration // absent; an explicit zero is out of range, as in kvlease.Store.Grant
	if req.TTL != nil {
		d = time.Duration(*req.TTL)
	}
	if err := s.checkAttributes(req.Attributes); err != nil {
		return api.Lease{}, err
	}
	// A lease that is live is not refused here: a retry of its grant
	// recovers it, and another holder's grant is refused held.
	if n, live := s.holders.total(req.Name); s.cfg.MaxLeases > 0 && n >= s.cfg.MaxLeases && !live {
		return api.Lease{}, fmt.Errorf("%w: the bucket has %d live leases, limit %d (serve --max-leases)", api.ErrLimitExceeded, n, s.cfg.MaxLeases)
	}
	if n := s.holders.leases(req.Holder, req.Name); s.cfg.MaxLeasesPerHolder > 0 && n >= s.cfg.MaxLeasesPerHolder {
		// Leases the server kept past their TTL do not count.
		if n -= len(s.overdue(ctx, "", req.Holder)); n >= s.cfg.MaxLeasesPerHolder {
			return api.Lease{}, fmt.Errorf("%w: holder %q has %d leases, limit %d", api.ErrLimitExceeded, req.Holder, n, s.cfg.MaxLeasesPerHolder)
		}
	}
	secret := req.Secret
	switch {
	case secret != "":
		if err := kvlease.ValidateSecret(secret); err != nil {
			return api.Lease{}, err
		}
	case req.RequestID != "":
		return api.Lease{}, fmt.Errorf("%w: request_id needs a secret of the caller's choosing, which a retry presents again",
			kvlease.ErrInvalidRequestID)
	default:
		secret = newSecret()
	}
	rec, err := s.store.Grant(ctx, kvlease.GrantRequest{
		Name: req.Name, Holder: req.Holder, Duration: d, Attributes: req.Attributes, Secret: secret,
		RequestID: req.RequestID,
	})
	if err != nil {
		return api.Lease{}, err
	}
	s.holders.granted(rec.Name, rec.Holder, rec.Revision)
	// Counted here, as well as when the watch sees it (once): the watch's
	// event may come after this answer, and this grant's span would miss
	// the flapping it makes.
	if _, flapping := s.flaps.GrantedTenure(rec.Name, uint64(rec.Token), time.Now()); flapping {
		trace.SpanFromContext(ctx).AddEvent("lease.flapping", trace.WithAttributes(
			telemetry.AttrName.String(rec.Name), telemetry.AttrFlapping.Bool(true)))
		trace.SpanFromContext(ctx).SetAttributes(telemetry.AttrFlapping.Bool(true))
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) renew(ctx context.Context, data []byte) (any, error) {
	var req api.RenewRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	var d time.Duration // absent: kvlease.Store.Renew keeps the tenure's duration
	if req.TTL != nil {
		if d = time.Duration(*req.TTL); d <= 0 {
			return nil, fmt.Errorf("%w: ttl %v (omit ttl to keep the tenure's duration)", kvlease.ErrDurationOutOfRange, d)
		}
	}
	rec, err := s.store.Renew(ctx, kvlease.RenewRequest{
		Name: req.Name, Holder: req.Holder, Token: kvlease.Token(req.Token), Revision: req.Revision,
		Duration: d, Secret: req.Secret, SecretRequired: true,
	})
	if err != nil {
		return nil, err
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) release(ctx context.Context, data []byte) (any, error) {
	var req api.ReleaseRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	if err := s.releaseLease(ctx, req); err != nil {
		return nil, err
	}
	return struct{}{}, nil
}

// releaseLease releases req's tenure and updates the per-holder count.
func (s *Service) releaseLease(ctx context.Context, req api.ReleaseRequest) error {
	err := s.store.Release(ctx, kvlease.ReleaseRequest{
		Name: req.Name, Holder: req.Holder, Token: kvlease.Token(req.Token), Revision: req.Revision, Secret: req.Secret,
		SecretRequired: true,
	})
	if err != nil {
		return err
	}
	s.holders.released(req.Name, req.Revision)
	return nil
}

func (s *Service) get(ctx context.Context, data []byte) (any, error) {
	var req api.GetRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	rec, err := s.store.Get(ctx, req.Name)
	if err != nil {
		return nil, err
	}
	return toWire(rec, time.Now()), nil
}

func (s *Service) list(ctx context.Context, data []byte) (any, error) {
	var req api.ListRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, fmt.Errorf("%w: limit %d (0 for no limit)", api.ErrInvalidRequest, req.Limit)
	}
	// Checked here, not only where the bucket is read: a page or a count
	// comes from the index, which matches any prefix (nothing, for a bad one).
	if err := kvlease.ValidatePrefix(req.Prefix); err != nil {
		return nil, err
	}
	recs, count, err := s.live(ctx, req)
	if err != nil {
		return nil, err
	}
	out := listPage{Leases: []json.RawMessage{}, Count: count}
	if req.CountOnly {
		return out, nil
	}
	// In name order (Store.List sorts them): a page begins after After.
	recs = recs[sort.Search(len(recs), func(i int) bool { return recs[i].Name > req.After }):]
	now := time.Now()
	out.Leases, out.More, err = api.Page(recs, req.Limit, s.nc.MaxPayload(), func(r *kvlease.Record) ([]byte, error) {
		l := toWire(*r, now)
		l.Flapping = s.flaps.Flapping(r.Name, now)
		return l.AppendJSON(nil)
	}, func(n int) error {
		return fmt.Errorf("%w: a list of %d leases exceeds the server's max payload: ask for pages (limit) or narrow the prefix",
			api.ErrTooLarge, n)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// live returns the live leases a list asks for, in name order (none for
// a count), and how many there are. They come from the service's own
// index of live leases, once that has applied everything the bucket held
// when the request came: no read of the whole bucket per list, page or
// count. If the index does not get there in a while, the bucket is read.
func (s *Service) live(ctx context.Context, req api.ListRequest) (recs []*kvlease.Record, count int, err error) {
	last, err := s.store.LastRevision(ctx)
	if err != nil {
		return nil, 0, err
	}
	wctx, cancel := context.WithTimeout(ctx, indexWait)
	ok := s.holders.at(wctx, last, func() {
		if req.CountOnly {
			count = s.holders.countLocked(req.Prefix)
		} else {
			recs = s.holders.liveLocked(req.Prefix)
			count = len(recs)
		}
	})
	cancel()
	if ok {
		// Records the server kept past their TTL (an expiry lost over
		// an unclean restart) are not live, though the observer has
		// not ended them yet.
		if gone := s.overdue(ctx, req.Prefix, ""); len(gone) > 0 {
			if req.CountOnly {
				return nil, max(count-len(gone), 0), nil
			}
			recs = slices.DeleteFunc(recs, func(r *kvlease.Record) bool { return gone[r.Name] })
			count = len(recs)
		}
		return recs, count, nil
	}
	all, err := s.store.List(ctx, req.Prefix)
	if err != nil {
		return nil, 0, err
	}
	for i := range all {
		if !reserved(all[i].Name) {
			recs = append(recs, &all[i])
		}
	}
	return recs, len(recs), nil
}

// listPage is the wire form of api.ListReply with each lease encoded once,
// as the list measured it against the reply's size.
type listPage struct {
	Leases []json.RawMessage `json:"leases"`
	Count  int               `json:"count"`
	More   bool              `json:"more,omitempty"`
}

// indexWait bounds how long a count or a page waits for the index to
// catch up with the bucket before it reads the bucket instead.
const indexWait = 2 * time.Second

func (s *Service) revoke(ctx context.Context, data []byte) (any, error) {
	var req api.RevokeRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, err
	}
	if reserved(req.Name) {
		// The observer's lease and the like: revoked, the node's history
		// and change events stopped until it was taken again (found by
		// an outside client).
		return nil, reservedName()
	}
	if req.Reason == "" {
		req.Reason = "revoked by operator"
	}
	if err := kvlease.ValidateReason(req.Reason); err != nil {
		return nil, fmt.Errorf("%w: %w", api.ErrInvalidRequest, err)
	}
	if strings.HasPrefix(req.Reason, history.GossipReasonPrefix) || req.Reason == kvlease.UnseenEndReason {
		// The observer tells these ends by their reasons: an operator's
		// revocation given one was recorded, counted and traced as a
		// removal by gossip, or an end of unknown cause (found by an
		// operator probe of the history).
		return nil, fmt.Errorf("%w: the revocation reason %q is the grantor's own (a removal by gossip begins %q)",
			api.ErrInvalidRequest, req.Reason, history.GossipReasonPrefix)
	}
	var opts []kvlease.RevokeOption
	if req.FreeNow {
		opts = append(opts, kvlease.FreeNow())
	}
	if req.Token != 0 {
		opts = append(opts, kvlease.OnlyTenure(kvlease.Token(req.Token)))
	}
	rec, err := s.store.Revoke(ctx, req.Name, req.Reason, opts...)
	if err != nil {
		return nil, err
	}
	// An operator's act, logged where it was carried out: the history
	// records the end of a tenure, not a hold freed at once (found by an
	// outside client, whose revoke --now of a held lease left no trace).
	s.log.Info("lease revoked", "lease", req.Name, "holder", rec.Holder, "token", rec.Token, "reason", req.Reason,
		"free_now", req.FreeNow)
	if rec.Revision == 0 { // a hold freed: no record ended (kvlease.FreeNow)
		return api.FreedHold{Name: rec.Name, Holder: rec.Holder, Token: uint64(rec.Token), ServerTime: time.Now(), Node: s.node}, nil
	}
	l := toWire(rec, time.Now())
	if !req.FreeNow {
		// Held for the tenure's server TTL from the revocation (as
		// kvlease.Store.Revoke holds it), said in the reply: a client
		// cannot tell otherwise, and a grantor older than the hold
		// frees the lease at once.
		hold := cmp.Or(rec.TTL, kvlease.ServerTTL(rec.Duration, s.store.GrantorMargin()))
		l.HeldBackMS = (hold + time.Millisecond - 1).Milliseconds()
	}
	return l, nil
}

func (s *Service) checkAttributes(attrs map[string]string) error {
	if len(attrs) > s.cfg.MaxAttributes {
		return fmt.Errorf("%w: %d attributes, limit %d", api.ErrTooLarge, len(attrs), s.cfg.MaxAttributes)
	}
	n := 0
	for k, v := range attrs {
		if k == "" {
			return fmt.Errorf("%w: empty attribute key", api.ErrInvalidRequest)
		}
		n += len(k) + len(v)
	}
	if n > s.cfg.MaxAttributeBytes {
		return fmt.Errorf("%w: attributes of %d bytes, limit %d", api.ErrTooLarge, n, s.cfg.MaxAttributeBytes)
	}
	return nil
}

// reservedName is the refusal of a request naming one of the grantor's
// own leases.
func reservedName() error {
	return fmt.Errorf("%w: lease names beginning %q are the grantor's own", kvlease.ErrInvalidName, ReservedPrefix)
}

// ValidateName is [kvlease.ValidateName] for a lease a client takes
// beside a grantor: it also refuses the grantor's own names
// ([ReservedPrefix]), as the service does, for tools that write the
// bucket directly (an election campaigning for the observer's lease
// locked the grantor's observer out: found by an outside client).
func ValidateName(name string) error {
	if err := kvlease.ValidateName(name); err != nil {
		return err
	}
	if reserved(name) {
		return reservedName()
	}
	return nil
}

// toWire is r in its wire form, with the server's time now.
func toWire(r kvlease.Record, now time.Time) api.Lease {
	l := api.LeaseOf(r)
	l.ServerTime = now
	return l
}

// newSecret returns 128 random bits, hex-encoded.
func newSecret() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// holderIndex counts live leases per holder. It follows the bucket's
// stream (in revision order) and also applies the service's own grants and
// releases at once, so that a holder cannot outrun the stream. A local change
// is remembered ("ahead") until the stream reaches it, so that older stream
// events cannot undo it; memory stays proportional to live leases.
type holderIndex struct {
	mu        sync.Mutex
	watermark uint64          // last revision applied from the stream
	advanced  chan struct{}   // closed (and replaced) as watermark advances
	byName    map[string]held // live leases
	ahead     map[string]uint64
	count     map[string]int // holder → live leases
}

type held struct {
	holder string
	rev    uint64
	rec    *kvlease.Record // the stream's last record of it (shared with the watch: read only); nil if not from the stream
}

func newHolderIndex() holderIndex {
	return holderIndex{advanced: make(chan struct{}), byName: map[string]held{}, ahead: map[string]uint64{}, count: map[string]int{}}
}

// follow applies the watch's events, calls onChange for each change (not
// the replay), onLive with the number of live leases after each event and
// once caught up with the bucket, and then passes each event on.
func (h *holderIndex) follow(w *kvlease.Watcher, log *slog.Logger, onChange func(kvlease.Event), onLive func(n int),
	then func(kvlease.Event)) {
	// Caught up, the count is said whatever the replay held: a bucket
	// with no lease but the grantor's own gave no event to say it by, and
	// leased_leases_live was missing, not 0, until the first lease (found
	// by an operator, scraping a new serve).
	if w.CatchUp(context.Background(), func(ev kvlease.Event) error {
		h.apply(ev, onChange, onLive)
		then(ev)
		return nil
	}) == nil {
		h.mu.Lock()
		n := len(h.byName)
		h.mu.Unlock()
		onLive(n)
	}
	for ev := range w.Events() {
		h.apply(ev, onChange, onLive)
		then(ev)
	}
	if err := w.Err(); err != nil {
		log.Error("per-holder lease counting stopped; limits are no longer enforced accurately", "err", err)
	}
}

func (h *holderIndex) apply(ev kvlease.Event, onChange func(kvlease.Event), onLive func(n int)) {
	if reserved(ev.Name) {
		h.mu.Lock()
		h.advanceLocked(ev.Revision)
		h.mu.Unlock()
		return // the grantor's own leases count for no holder
	}
	if !ev.Replay {
		onChange(ev)
	}
	holder := ev.Holder
	if ev.Type.Ends() || ev.Type == kvlease.EventFreed { // a free names the tenure its revocation ended
		holder = ""
	}
	h.mu.Lock()
	h.advanceLocked(ev.Revision)
	if ev.Revision >= h.ahead[ev.Name] {
		delete(h.ahead, ev.Name)
		h.setLocked(ev.Name, holder, ev.Revision, ev.Record)
	}
	n := len(h.byName)
	h.mu.Unlock()
	onLive(n)
}

func (h *holderIndex) advanceLocked(rev uint64) {
	if rev > h.watermark {
		h.watermark = rev
		close(h.advanced)
		h.advanced = make(chan struct{})
	}
}

// at waits until the index has applied the stream up to revision rev,
// then calls fn with it locked: what fn reads is as current as a read of
// the bucket made when rev was its last revision (a read index, as etcd
// serves linearizable reads from its applied state). It reports false if
// the index has not got there when ctx ends: the stream held something
// that made no event (an undecodable entry), or this node's watch is
// behind.
func (h *holderIndex) at(ctx context.Context, rev uint64, fn func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.watermark < rev {
		advanced := h.advanced
		h.mu.Unlock()
		select {
		case <-advanced:
		case <-ctx.Done():
			h.mu.Lock()
			return false
		}
		h.mu.Lock()
	}
	fn()
	return true
}

// overdue returns the names of the leases under prefix (of holder, if
// not "") in the index that the server has kept past their TTL
// (kvlease.Store.Overdue).
func (s *Service) overdue(ctx context.Context, prefix, holder string) map[string]bool {
	recs := s.holders.expired(prefix, holder, time.Now())
	if len(recs) == 0 {
		return nil
	}
	gone := map[string]bool{}
	for _, r := range s.store.Overdue(ctx, slices.Values(recs)) {
		gone[r.Name] = true
	}
	return gone
}

// expired returns the records of the live leases under prefix (of
// holder, if not "") whose expiry, by the server's timestamps, is before
// now: the only ones the server may have kept past their TTL.
func (h *holderIndex) expired(prefix, holder string, now time.Time) []kvlease.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []kvlease.Record
	for name, l := range h.byName {
		if l.rec != nil && strings.HasPrefix(name, prefix) && (holder == "" || l.holder == holder) &&
			l.rec.TTL > 0 && now.After(l.rec.ExpiresAt()) {
			out = append(out, *l.rec)
		}
	}
	return out
}

// countLocked counts the leases liveLocked returns.
func (h *holderIndex) countLocked(prefix string) int {
	n := 0
	for name, l := range h.byName {
		if l.rec != nil && strings.HasPrefix(name, prefix) {
			n++
		}
	}
	return n
}

// liveLocked returns the records of the live leases under prefix, in
// name order (shared with the watch: read only). An entry of this
// service's own grant that the stream has not delivered yet has no record
// and is left out: a grant after the read's revision, so not one the read
// must show.
func (h *holderIndex) liveLocked(prefix string) []*kvlease.Record {
	var out []*kvlease.Record
	for name, l := range h.byName {
		if l.rec != nil && strings.HasPrefix(name, prefix) {
			out = append(out, l.rec)
		}
	}
	slices.SortFunc(out, func(a, b *kvlease.Record) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// granted records this service's grant at revision rev.
func (h *holderIndex) granted(name, holder string, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev <= h.watermark { // the stream got there first
		return
	}
	h.ahead[name] = rev
	h.setLocked(name, holder, rev, nil)
}

// released records this service's release of the tenure at revision rev;
// the tombstone's own revision is higher, and unknown here.
func (h *holderIndex) released(name string, rev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur, ok := h.byName[name]; ok && cur.rev > rev {
		return // a newer tenure
	}
	// The tombstone is above rev: until the stream is past rev, older
	// events of the tenure are still to come and must not undo this. Once
	// it is, none is, and an entry here would wait for an event of name
	// that may never come (the watch applied the tombstone before this
	// answer: one entry per name ever released).
	if rev >= h.watermark {
		h.ahead[name] = max(h.ahead[name], rev+1)
	}
	h.setLocked(name, "", rev+1, nil)
}

func (h *holderIndex) setLocked(name, holder string, rev uint64, rec *kvlease.Record) {
	if old, ok := h.byName[name]; ok {
		h.count[old.holder]--
		if h.count[old.holder] == 0 {
			delete(h.count, old.holder)
		}
		delete(h.byName, name)
	}
	if holder != "" {
		h.byName[name] = held{holder, rev, rec}
		h.count[holder]++
	}
}

// leases counts holder's live leases other than name: a grant of name
// that is a retry of holder's own counts its tenure once.
// total returns how many leases are live, and whether name is one.
func (h *holderIndex) total(name string) (n int, live bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, live = h.byName[name]
	return len(h.byName), live
}

func (h *holderIndex) leases(holder, name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.count[holder]
	if l, ok := h.byName[name]; ok && l.holder == holder {
		n--
	}
	return n
}
