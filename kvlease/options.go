package kvlease

import (
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
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
	logger        *slog.Logger
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
	}
}

// WithBucket names the lease bucket. Default [DefaultBucket]. An empty
// name is an error.
func WithBucket(name string) Option {
	return func(o *options) error {
		if name == "" {
			return fmt.Errorf("%w: empty bucket name", ErrInvalidOption)
		}
		o.bucket = name
		return nil
	}
}

// WithReplicas sets the bucket's replica count when Open creates it: 1 on a
// single server, 3 on a cluster. An existing bucket keeps its own. A count
// outside 1..5 (JetStream's range) is an error.
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
		o.grantorMargin = d
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
		o.minDuration, o.maxDuration = minD, maxD
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
