package telemetry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/leased/leased"

// Metrics are the lease signals an operator needs. Every method is safe on
// a nil *Metrics (it does nothing), so instrumented code needs no checks.
//
// No metric carries a lease name by default: the number of series does not
// grow with the number of leases. [WithLeaseNamePrefixes] opts chosen
// leases (a few elections, say) into a lease.name attribute on ownership
// changes.
type Metrics struct {
	renewalDuration metric.Float64Histogram
	renewalFailures metric.Int64Counter
	lateEffects     metric.Int64Counter
	ownership       metric.Int64Counter
	rejections      metric.Int64Counter
	clockOffset     metric.Float64Gauge
	clockMargin     metric.Float64Gauge
	live            metric.Int64Gauge
	requests        metric.Int64Counter
	requestDuration metric.Float64Histogram
	leaseEvents     metric.Int64Counter
	storeWrites     metric.Int64Histogram
	givenUp         metric.Int64Counter

	namePrefixes []string
	namedMu      sync.Mutex
	named        map[string]struct{} // the names with series of their own: MaxNamedLeases at most

	// The attribute sets of requests (by op and outcome) and lease events
	// (by event), made once each: a set is sorted and hashed when made,
	// which on a grantor's every request and every change it watches cost
	// more than recording the measurements. Bounded as the labels are.
	requestAttrs attrCache[requestLabels]
	eventAttrs   attrCache[string]
}

type requestLabels struct{ op, outcome string }

// attrCache holds measurement options by label values.
type attrCache[K comparable] struct {
	mu sync.RWMutex
	m  map[K]metric.MeasurementOption
}

// get returns the option of key's attributes, making it from attrs the
// first time.
func (c *attrCache[K]) get(key K, attrs func() []attribute.KeyValue) metric.MeasurementOption {
	c.mu.RLock()
	o, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return o
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o, ok := c.m[key]; ok {
		return o
	}
	if c.m == nil {
		c.m = map[K]metric.MeasurementOption{}
	}
	o = metric.WithAttributeSet(attribute.NewSet(attrs()...))
	c.m[key] = o
	return o
}

// RenewalOutcomes are the outcomes a failed renewal is counted under.
var RenewalOutcomes = []string{"unavailable", "not_holder", "not_found", "expired"}

// MetricsOption configures [NewMetrics].
type MetricsOption func(*Metrics) error

// WithLeaseNamePrefixes adds the lease.name attribute to ownership changes
// of the leases whose names start with one of prefixes (each a series of
// its own: choose prefixes that match few leases). An empty prefix would
// match every lease and is refused.
func WithLeaseNamePrefixes(prefixes ...string) MetricsOption {
	return func(m *Metrics) error {
		for _, p := range prefixes {
			if p == "" {
				return errors.New("telemetry: an empty lease name prefix would label every lease")
			}
		}
		m.namePrefixes = append(m.namePrefixes, prefixes...)
		return nil
	}
}

// RenewalBuckets are the renewal-latency histogram's bounds, in seconds:
// from a local round trip to the point where a renewal eats the margin.
var RenewalBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// WriteBuckets are the store-write histogram's bounds, in messages: up to
// the server's largest atomic batch.
var WriteBuckets = []float64{1, 2, 4, 8, 16, 24, 32, 64, 128, 256, 512, 1000}

// NewMetrics creates the instruments on mp (nil: the global provider).
func NewMetrics(mp metric.MeterProvider, opts ...MetricsOption) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	var x Metrics
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("telemetry: nil metrics option")
		}
		if err := opt(&x); err != nil {
			return nil, err
		}
	}
	var err error
	set := func(e error) {
		if err == nil {
			err = e
		}
	}
	x.renewalDuration, err = m.Float64Histogram(MetricRenewalDuration, metric.WithUnit("s"),
		metric.WithDescription("Round trip of successful lease renewals"),
		metric.WithExplicitBucketBoundaries(RenewalBuckets...))
	var e error
	x.renewalFailures, e = m.Int64Counter(MetricRenewalFailures,
		metric.WithDescription("Renewals that failed, by outcome (unavailable, not_holder, not_found, expired)"))
	set(e)
	x.lateEffects, e = m.Int64Counter(MetricExpiriesDuringWork,
		metric.WithDescription("Checks before an effect that found the holder's deadline already passed"))
	set(e)
	x.ownership, e = m.Int64Counter(MetricOwnershipChanges,
		metric.WithDescription("New tenures (whoever the holder), by whether the lease is flapping (and lease.name for opted-in prefixes)"))
	set(e)
	x.rejections, e = m.Int64Counter(MetricFenceRejections,
		metric.WithDescription("Writes refused by a fence for a stale token"))
	set(e)
	x.clockOffset, e = m.Float64Gauge(MetricClockOffset, metric.WithUnit("s"),
		metric.WithDescription("Estimated clock offset to the grantor (clock.peer)"))
	set(e)
	x.clockMargin, e = m.Float64Gauge(MetricClockMargin, metric.WithUnit("s"),
		metric.WithDescription("Error bound of the clock offset estimate (half the round trip of the sample it rests on): the offset is known to within it"))
	set(e)
	x.live, e = m.Int64Gauge(MetricLeasesLive, metric.WithDescription("Live leases seen by this grantor"))
	set(e)
	x.requests, e = m.Int64Counter(MetricRequests,
		metric.WithDescription("Requests the grantor answered, by operation (lease.op) and outcome code (lease.outcome)"))
	set(e)
	x.requestDuration, e = m.Float64Histogram(MetricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Time the grantor took to answer a request, by operation and outcome code"),
		metric.WithExplicitBucketBoundaries(RenewalBuckets...))
	set(e)
	x.leaseEvents, e = m.Int64Counter(MetricLeaseEvents,
		metric.WithDescription("Changes the grantor saw on the lease bucket, whoever made them: granted, renewed, released, revoked, removed (a registration gossip removed), expired (lease.event)"))
	set(e)
	x.storeWrites, e = m.Int64Histogram(MetricStoreWrites, metric.WithUnit("{message}"),
		metric.WithDescription("Messages per write the lease store sent to the bucket, by write.kind (single or batch): the count is the writes (each synced on its own), the sum the messages"),
		metric.WithExplicitBucketBoundaries(WriteBuckets...))
	set(e)
	x.givenUp, e = m.Int64Counter(MetricItemsGivenUp,
		metric.WithDescription("Work items given up after as many claims as the queue allows (workqueue.WithMaxClaims), by workqueue.name"))
	set(e)
	if err != nil {
		return nil, err
	}
	return &x, nil
}

// RenewalSucceeded records a renewal's round trip.
func (m *Metrics) RenewalSucceeded(ctx context.Context, d time.Duration) {
	if m != nil {
		m.renewalDuration.Record(ctx, d.Seconds())
	}
}

// RenewalFailed records a failed renewal with its outcome label.
func (m *Metrics) RenewalFailed(ctx context.Context, outcome string) {
	if m != nil {
		m.renewalFailures.Add(ctx, 1, metric.WithAttributes(AttrOutcome.String(outcome)))
	}
}

// LateEffect records an effect attempted after the holder's deadline.
func (m *Metrics) LateEffect(ctx context.Context) {
	if m != nil {
		m.lateEffects.Add(ctx, 1)
	}
}

// HolderStarted makes a holder's counters visible at zero (renewal
// failures by outcome, expiries during work), so that a scrape shows them
// before the first failure and rates can be computed from the start.
func (m *Metrics) HolderStarted(ctx context.Context) {
	if m != nil {
		for _, o := range RenewalOutcomes {
			m.renewalFailures.Add(ctx, 0, metric.WithAttributes(AttrOutcome.String(o)))
		}
		m.lateEffects.Add(ctx, 0)
	}
}

// OwnershipChanged records a new tenure of lease. The lease's name is an
// attribute only if it matches a prefix of [WithLeaseNamePrefixes].
func (m *Metrics) OwnershipChanged(ctx context.Context, lease string, flapping bool) {
	if m == nil {
		return
	}
	attrs := []attribute.KeyValue{AttrFlapping.Bool(flapping)}
	if m.nameLabelled(lease) {
		attrs = append(attrs, AttrName.String(lease))
	}
	m.ownership.Add(ctx, 1, metric.WithAttributes(attrs...))
}

// MaxNamedLeases bounds the leases whose ownership changes are counted
// under their own name ([WithLeaseNamePrefixes]): past it, new names are
// counted without it. The SDK's own limit (2,000 series an instrument, the
// last its overflow series) put every series past it in one without the
// lease.flapping label: each name has two series (flapping or not), and
// the unnamed two, so 900 names stay below it.
const MaxNamedLeases = 900

// nameLabelled reports whether lease's changes carry its name: it matches
// a prefix, and it has a series already or there is room for one.
func (m *Metrics) nameLabelled(lease string) bool {
	if !slices.ContainsFunc(m.namePrefixes, func(p string) bool { return strings.HasPrefix(lease, p) }) {
		return false
	}
	m.namedMu.Lock()
	defer m.namedMu.Unlock()
	if _, ok := m.named[lease]; ok {
		return true
	}
	if len(m.named) >= MaxNamedLeases {
		return false
	}
	if m.named == nil {
		m.named = map[string]struct{}{}
	}
	m.named[lease] = struct{}{}
	return true
}

// Request records a request the grantor answered: its operation (a bounded
// set: callers map unknown verbs to "unknown"), outcome code ("ok" or the
// error code) and how long it took.
func (m *Metrics) Request(ctx context.Context, op, outcome string, d time.Duration) {
	if m != nil {
		attrs := m.requestAttrs.get(requestLabels{op, outcome}, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrOp.String(op), AttrOutcome.String(outcome)}
		})
		m.requests.Add(ctx, 1, attrs)
		m.requestDuration.Record(ctx, d.Seconds(), attrs)
	}
}

// StoreWrite records a write the lease store sent: one publish (batch
// false, one message) or an atomic batch of n messages.
func (m *Metrics) StoreWrite(ctx context.Context, batch bool, n int) {
	if m != nil {
		kind := writeSingle
		if batch {
			kind = writeBatch
		}
		m.storeWrites.Record(ctx, int64(n), kind)
	}
}

var (
	writeSingle = metric.WithAttributeSet(attribute.NewSet(AttrWriteKind.String("single")))
	writeBatch  = metric.WithAttributeSet(attribute.NewSet(AttrWriteKind.String("batch")))
)

// LeaseEvent records a change the grantor saw on the bucket (granted,
// renewed, released, revoked, expired).
func (m *Metrics) LeaseEvent(ctx context.Context, event string) {
	if m != nil {
		m.leaseEvents.Add(ctx, 1, m.eventAttrs.get(event, func() []attribute.KeyValue {
			return []attribute.KeyValue{AttrEvent.String(event)}
		}))
	}
}

// StaleTokenRejected records a fence's refusal. The resource is not a
// label: fences guard as many resources as there are leases.
func (m *Metrics) StaleTokenRejected(ctx context.Context, resource string) {
	if m != nil {
		m.rejections.Add(ctx, 1)
	}
}

// ItemGivenUp records a work item of queue given up (a dead letter). The
// item is not a label: a queue holds as many items as it is given.
func (m *Metrics) ItemGivenUp(ctx context.Context, queue string) {
	if m != nil {
		m.givenUp.Add(ctx, 1, metric.WithAttributes(AttrQueue.String(queue)))
	}
}

// ClockOffset records the estimated offset to peer and the estimate's
// error bound (leased.clock.margin): not a limit the offset must keep
// within (deadlines are counted on monotonic clocks; only the clock rate
// matters for safety).
func (m *Metrics) ClockOffset(ctx context.Context, peer string, offset, margin time.Duration) {
	if m != nil {
		m.clockOffset.Record(ctx, offset.Seconds(), metric.WithAttributes(AttrPeer.String(peer)))
		m.clockMargin.Record(ctx, margin.Seconds(), metric.WithAttributes(AttrPeer.String(peer)))
	}
}

// LiveLeases records how many leases are live. A count, not deltas: a
// grantor that starts with leases already live, or misses an end while its
// watch is behind, still reports the truth once it has caught up.
func (m *Metrics) LiveLeases(ctx context.Context, n int64) {
	if m != nil {
		m.live.Record(ctx, n)
	}
}
