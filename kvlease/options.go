package kvlease

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures [Open].
type Option func(*options) error

type options struct {
	bucket        string
	replicas      int
	grantorMargin time.Duration
	minDuration   time.Duration
	maxDuration   time.Duration
	markerTTL     time.Duration
	create        bool
	tp            trace.TracerProvider
	mp            metric.MeterProvider
	logger        *slog.Logger
	batch         BatchLimits // Enabled false: every write is one publish
	batchSet      bool        // WithBatchLimits was given (else defaults by replicas)
	marginSet     bool        // WithGrantorMargin was given (else the bucket's policy, if any)
	rangeSet      bool        // WithDurationRange was given (else the bucket's policy, if any)
	setPolicy     bool        // WithBucketPolicy: record margin and range on the bucket
	overdueGrace  time.Duration
	firstToken    Token // WithFirstToken; 0: none
	// newFirst: WithNewBucketFirstToken; nil: none
	newFirst func(context.Context) (Token, error)
}

// DefaultBucket is the lease bucket's name unless [WithBucket] says otherwise.
const DefaultBucket = "leases"

// DefaultMarkerTTL is how long expiry markers and release tombstones stay in
// the bucket: long enough for a watcher that reconnects to see why a lease
// ended, short enough that churn does not pile them up.
const DefaultMarkerTTL = 5 * time.Minute

func defaultOptions() options {
	return options{
		bucket:        DefaultBucket,
		replicas:      1,
		grantorMargin: DefaultGrantorMargin,
		minDuration:   MinDuration,
		maxDuration:   DefaultMaxDuration,
		markerTTL:     DefaultMarkerTTL,
		create:        true,
		logger:        slog.New(slog.DiscardHandler),
		batch:         DefaultBatchLimits(1),
		overdueGrace:  OverdueGrace,
	}
}

// BatchLimits shape the Store's group commit: concurrent grants, renewals,
// releases and revocations that queue while a write is in flight go out
// together as one JetStream atomic batch, made durable with one sync (see
// [Store] and docs/performance.md). The server's own limits (its
// JetStream config: max_batch_size, max_batch_inflight_per_stream,
// max_batch_timeout) bound them: a Store must not be configured past the
// server it writes to, and every Store on a stream shares the server's
// per-stream in-flight limit.
type BatchLimits struct {
	// Enabled turns group commit on. Off, every write is one publish, as
	// before batching; durability is the same either way (a batch is
	// acknowledged only after its sync).
	Enabled bool
	// MinMessages is the break-even: fewer queued writes than this go out
	// as single publishes, pipelined, because an atomic batch has a fixed
	// cost (about four fsyncs on R1) that a small batch does not repay.
	// Measured here: about 24 on R1, 2–4 on R3 (docs/performance.md). At
	// least 2.
	MinMessages int
	// MaxMessages caps one batch. At most the server's max_batch_size
	// (1,000 by default), at least MinMessages.
	MaxMessages int
	// MaxInFlight is how many write slots this Store has: a request that
	// finds one free goes out at once, alone; one that arrives while all
	// are busy queues for the next write a slot takes (a batch, or below
	// MinMessages single publishes, which are then on their own and hold
	// no slot, as do requests passed through where batches do not form).
	// So it bounds the batches in flight, not the publishes. At least 1;
	// keep it well under the server's max_batch_inflight_per_stream (50 by
	// default), which all Stores on the stream share.
	MaxInFlight int
	// Linger is how long a write slot that has just answered a write may
	// wait for its callers' next requests before it takes what has queued,
	// so that concurrent callers that write in a loop merge into one batch
	// instead of splitting into cohorts that each pay the batch's fixed
	// cost. It applies only to requests already queued behind another
	// write, only when waiting can reach the break-even: a request that
	// finds a slot free is never delayed. Once the callers' requests have
	// begun to come back, the slot waits on only while the next comes
	// within 1 ms, so requests that come further apart than that (callers
	// that do not write in a loop) are not held for the whole Linger. 0
	// turns it off.
	Linger time.Duration
	// Timeout bounds the wait for a batch's acknowledgement: past it, every
	// request in the batch is answered [ErrUnavailable] (it may or may not
	// have been committed). The wait, which holds a write slot, also ends
	// as soon as the connection is lost (the ack is lost with it) or every
	// request's context has ended (nobody waits for the answer). At most
	// the server's max_batch_timeout (10 s by default), which bounds the
	// time from a batch's first message to its commit on the server; above
	// 0.
	Timeout time.Duration
}

// Server batch limits: nats-server's defaults (v2.15), which a Store's
// [BatchLimits] must not exceed unless the server is configured above them.
const (
	ServerMaxBatchSize     = 1000
	ServerMaxBatchInflight = 50
	ServerMaxBatchTimeout  = 10 * time.Second
)

// maxLinger bounds [BatchLimits.Linger]: a wait longer than a batch takes
// only delays.
const maxLinger = time.Second

// DefaultBatchLimits returns the limits a Store uses on a bucket of the
// given replica count unless [WithBatchLimits] or [WithoutBatching] says
// otherwise: batching on, the break-even measured for that replica count
// (24 messages on R1, 4 on R3), 1,000 messages per batch, 1 write in
// flight on R1 (the server serialises an R1 stream's batches, so a second
// one only splits the queue into smaller batches) and 8 on R3 (raft
// pipelines proposals; measured on three servers in one process, which
// is bound by CPU: at 16 clients 4 in flight made writes 0.68× raw single
// publishes, 8 0.79×, 16 0.85–0.94×; at 64 clients 4 0.89×, 8 0.95×, 16
// 0.68–0.77×), a linger of 5 ms on R1 (where a batch's fixed cost is
// several ms, and 64 callers' next requests through the service came back
// within 2 to 9 ms) and none on R3 (where it is small), a 10 s timeout. Grantors on one stream share the server's
// 50 batches in flight; a batch refused for that limit goes out as single
// publishes instead.
func DefaultBatchLimits(replicas int) BatchLimits {
	l := BatchLimits{Enabled: true, MinMessages: 24, MaxMessages: ServerMaxBatchSize, MaxInFlight: 1,
		Linger: 5 * time.Millisecond, Timeout: ServerMaxBatchTimeout}
	if replicas > 1 {
		l.MinMessages, l.MaxInFlight, l.Linger = 4, 8, 0
	}
	return l
}

// Validate reports limits that cannot work, with [ErrInvalidOption].
// Disabled limits are not checked.
func (l BatchLimits) Validate() error {
	switch {
	case !l.Enabled:
		return nil
	case l.MinMessages < 2:
		return fmt.Errorf("%w: batch break-even %d messages, want at least 2", ErrInvalidOption, l.MinMessages)
	case l.MaxMessages < l.MinMessages:
		return fmt.Errorf("%w: batch size %d below its break-even %d", ErrInvalidOption, l.MaxMessages, l.MinMessages)
	case l.MaxInFlight < 1:
		return fmt.Errorf("%w: %d batches in flight, want at least 1", ErrInvalidOption, l.MaxInFlight)
	case l.Linger < 0 || l.Linger > maxLinger:
		return fmt.Errorf("%w: batch linger %v, want 0 to %v", ErrInvalidOption, l.Linger, maxLinger)
	case l.Timeout <= 0:
		return fmt.Errorf("%w: batch timeout %v, want above 0", ErrInvalidOption, l.Timeout)
	}
	return nil
}

// WithBatchLimits sets the group commit's limits (see [BatchLimits]).
// Default: [DefaultBatchLimits] for the bucket's replica count. Limits that
// fail [BatchLimits.Validate] are an error.
func WithBatchLimits(l BatchLimits) Option {
	return func(o *options) error {
		if err := l.Validate(); err != nil {
			return err
		}
		o.batch, o.batchSet = l, true
		return nil
	}
}

// WithoutBatching makes every write one publish, as before group commit:
// for a server older than 2.12 (no atomic batches), or a bucket whose
// stream may not be changed to allow them.
func WithoutBatching() Option {
	return func(o *options) error { o.batch, o.batchSet = BatchLimits{}, true; return nil }
}

// WithBucket names the lease bucket. Default [DefaultBucket]. An empty
// name is an error.
func WithBucket(name string) Option {
	return func(o *options) error {
		if err := ValidateBucket(name); err != nil {
			return err
		}
		o.bucket = name
		return nil
	}
}

// ValidateBucket checks a bucket name as JetStream's key-value buckets
// want it (letters, digits, '_' and '-'), with [ErrInvalidOption]: a name
// the server can never accept is refused before anything is sent.
func ValidateBucket(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty bucket name", ErrInvalidOption)
	}
	for i := range len(name) {
		if c := name[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("%w: bucket name %q has %q at byte %d (want ASCII letters, digits, '_' and '-')", ErrInvalidOption, name, c, i)
		}
	}
	return nil
}

// WithReplicas sets the bucket's replica count when Open creates it. The
// default is 1 whatever the server, a cluster too (unlike serve, whose
// default is 3 there): on a cluster give 3, or a bucket Open creates
// lives on one node, and dies with it (it read "1 on a single server, 3
// on a cluster", taken for the default; found by an outside client whose
// bucket on a three-node cluster had one replica). An existing bucket
// keeps its own. A count outside 1..5 (JetStream's range) is an error.
func WithReplicas(n int) Option {
	return func(o *options) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d outside 1..5", ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}

// WithGrantorMargin sets m_g, added to every duration before it is rounded up
// to the server TTL. Default [DefaultGrantorMargin]. A negative margin is
// an error.
func WithGrantorMargin(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: negative grantor margin %v", ErrInvalidOption, d)
		}
		o.grantorMargin, o.marginSet = d, true
		return nil
	}
}

// WithDurationRange bounds the durations Grant and Renew accept. Defaults:
// [MinDuration] and [DefaultMaxDuration]. A minimum below [MinDuration], or
// a maximum below the minimum, is an error.
func WithDurationRange(minD, maxD time.Duration) Option {
	return func(o *options) error {
		switch {
		case minD < MinDuration:
			return fmt.Errorf("%w: minimum duration %v is below the server's 1 s TTL floor", ErrInvalidOption, minD)
		case maxD < minD:
			return fmt.Errorf("%w: maximum duration %v is below the minimum %v", ErrInvalidOption, maxD, minD)
		}
		o.minDuration, o.maxDuration, o.rangeSet = minD, maxD, true
		return nil
	}
}

// WithBucketPolicy makes Open record the Store's grantor margin and
// duration range on the bucket (its stream's metadata) as the bucket's
// policy. A Store opened without [WithGrantorMargin] or
// [WithDurationRange] follows the bucket's policy for what it was not
// given, so that holders and candidates that write the bucket directly
// (`leased elect`, `leased bench --direct`, a Go program) grant as the
// service does: `leased serve` opens its Store with it. A JetStream that
// refuses the update (an API error), or a NATS user that may not publish
// it ($JS.API.STREAM.UPDATE.KV_<bucket>), is logged, and Open goes on (the
// user's refusal once made Open wait until ctx ended: found by an outside
// client). A bucket Open creates is created with the policy.
func WithBucketPolicy() Option {
	return func(o *options) error {
		o.setPolicy = true
		return nil
	}
}

// WithMarkerTTL sets how long expiry markers and release tombstones stay in a
// bucket that Open creates. Default [DefaultMarkerTTL]. A TTL below 1 s (the
// server's floor) is an error.
func WithMarkerTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second {
			return fmt.Errorf("%w: marker TTL %v is below 1 s", ErrInvalidOption, d)
		}
		o.markerTTL = d
		return nil
	}
}

// WithOverdueGrace sets how far past its expiry, by this machine's clock
// and the NATS server's, a record the server still holds must be for the
// Store to take it as lapsed. Default [OverdueGrace]; 0 trusts the two
// clocks to agree exactly (one machine). Negative is an error.
func WithOverdueGrace(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: overdue grace %v is negative", ErrInvalidOption, d)
		}
		o.overdueGrace = d
		return nil
	}
}

// MaxFirstToken is the largest first token [WithFirstToken] takes, 2^61:
// it leaves the bucket 2^61 revisions (73,000 years of a million writes a
// second) below 2^62. nats-server's file store (v2.15.2) marks tombstones
// with bit 62 of a sequence number, and reads a message whose sequence has
// it as one: a bucket begun at 2^62 lost its first grant at once, and one
// begun just below 2^63 stopped answering for its stream within seconds
// (found trying --first-token far above, as README advised). Fences take
// tokens up to 2^63-1 (PostgreSQL's bigint), above any the bucket issues.
const MaxFirstToken Token = 1 << 61

// WithFirstToken makes a bucket that Open creates begin its revisions, the
// fencing tokens, at first instead of 1: for a bucket made anew after the
// old one was lost (a lost disk, a cluster started on new data
// directories), give first above every token the old bucket issued, and
// the fences that saw those accept the new tokens (they refuse tokens
// below the highest they saw: safe, but nothing could be written until the
// new bucket's revisions passed it). etcd's restore has --bump-revision for
// the same reason. The first revision is part of the bucket's stream
// configuration (its first_seq), which the server keeps and applies again
// at every start.
//
// A bucket that exists already keeps its revisions: Open fails with
// [ErrBucket] if its revisions are below first (they cannot be raised in
// place), and goes on if they are at or above it. 0 or 1: revisions begin
// at 1. Above [MaxFirstToken] is an error.
func WithFirstToken(first Token) Option {
	return func(o *options) error {
		if first > MaxFirstToken {
			return fmt.Errorf("%w: first token %d above %d (2^61): nats-server's file store takes sequence numbers, the "+
				"revisions, only below 2^62, and the bucket needs room for its own", ErrInvalidOption, first, MaxFirstToken)
		}
		o.firstToken = first
		return nil
	}
}

// WithNewBucketFirstToken makes Open ask first, when it is about to create
// the bucket (it found none), for a first token: the bucket begins at the
// larger of first's answer and [WithFirstToken]'s. For a first token read
// from elsewhere (serve reads its history's), which can be read only once
// JetStream answers, and only matters for a bucket that is missing then:
// Open calls first after it has waited for JetStream to say so, under the
// attempt's ctx. An error from first fails that attempt of Open, which
// tries again after an [ErrUnavailable]. An answer above [MaxFirstToken] is
// [ErrInvalidOption]. A bucket that exists already is checked against
// [WithFirstToken]'s alone. A nil first is an error.
func WithNewBucketFirstToken(first func(ctx context.Context) (Token, error)) Option {
	return func(o *options) error {
		if first == nil {
			return fmt.Errorf("%w: nil first token function", ErrInvalidOption)
		}
		o.newFirst = first
		return nil
	}
}

// WithoutCreate makes Open fail with [ErrBucket] instead of creating a
// missing bucket.
func WithoutCreate() Option {
	return func(o *options) error { o.create = false; return nil }
}

// WithTracerProvider sets where the store's (the grantor's) spans go.
// Default: the global provider. A nil provider is an error. For the
// holder's spans see [WithHolderTracerProvider].
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		if tp == nil {
			return fmt.Errorf("%w: nil tracer provider", ErrInvalidOption)
		}
		o.tp = tp
		return nil
	}
}

// WithStoreMeterProvider sets where the store's metrics go: messages per
// write by kind (single publish or atomic batch; see
// telemetry.MetricStoreWrites), which shows how well group commit merges
// concurrent writes; and those of the recipes built on the Store
// (kvlease/workqueue's items given up). Default: the global provider. A nil provider is an
// error. For the holder's metrics see [WithMeterProvider].
func WithStoreMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return fmt.Errorf("%w: nil meter provider", ErrInvalidOption)
		}
		o.mp = mp
		return nil
	}
}

// WithLogger sets the logger. Default: discard. A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

func (o *options) tracerProvider() trace.TracerProvider {
	if o.tp == nil {
		return otel.GetTracerProvider()
	}
	return o.tp
}
