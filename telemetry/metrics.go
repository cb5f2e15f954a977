package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const meterName = "github.com/leased/leased"

// Metrics are the lease signals an operator needs. Every method is safe on
// a nil *Metrics (it does nothing), so instrumented code needs no checks.
//
// Lease names appear as attributes only on ownership changes (low rate by
// nature); the high-rate signals carry none, to keep cardinality bounded.
type Metrics struct {
	renewalDuration metric.Float64Histogram
	renewalFailures metric.Int64Counter
	lateEffects     metric.Int64Counter
	ownership       metric.Int64Counter
	rejections      metric.Int64Counter
	clockOffset     metric.Float64Gauge
	clockMargin     metric.Float64Gauge
	live            metric.Int64Gauge
}

// Attribute keys of the metrics.
const (
	AttrLease    = attribute.Key("lease.name")
	AttrOutcome  = attribute.Key("lease.outcome")
	AttrFlapping = attribute.Key("lease.flapping")
	AttrResource = attribute.Key("fence.resource")
	AttrPeer     = attribute.Key("clock.peer")
)

// RenewalBuckets are the renewal-latency histogram's bounds, in seconds:
// from a local round trip to the point where a renewal eats the margin.
var RenewalBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// NewMetrics creates the instruments on mp (nil: the global provider).
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(meterName)
	var x Metrics
	var err error
	set := func(e error) {
		if err == nil {
			err = e
		}
	}
	x.renewalDuration, err = m.Float64Histogram("leased.renewal.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of successful lease renewals"),
		metric.WithExplicitBucketBoundaries(RenewalBuckets...))
	var e error
	x.renewalFailures, e = m.Int64Counter("leased.renewal.failures",
		metric.WithDescription("Renewals that failed, by outcome (unavailable, not_holder, not_found, expired)"))
	set(e)
	x.lateEffects, e = m.Int64Counter("leased.expiries_during_work",
		metric.WithDescription("Checks before an effect that found the holder's deadline already passed"))
	set(e)
	x.ownership, e = m.Int64Counter("leased.ownership.changes",
		metric.WithDescription("New tenures (changes of holder), by lease and whether it is flapping"))
	set(e)
	x.rejections, e = m.Int64Counter("leased.fence.rejections",
		metric.WithDescription("Writes refused by a fence for a stale token"))
	set(e)
	x.clockOffset, e = m.Float64Gauge("leased.clock.offset", metric.WithUnit("s"),
		metric.WithDescription("Estimated clock offset to a peer (grantor or gossip member)"))
	set(e)
	x.clockMargin, e = m.Float64Gauge("leased.clock.margin", metric.WithUnit("s"),
		metric.WithDescription("The margin the clock offset must stay within"))
	set(e)
	x.live, e = m.Int64Gauge("leased.leases.live", metric.WithDescription("Live leases seen by this grantor"))
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

// OwnershipChanged records a new tenure of lease.
func (m *Metrics) OwnershipChanged(ctx context.Context, lease string, flapping bool) {
	if m != nil {
		m.ownership.Add(ctx, 1, metric.WithAttributes(AttrLease.String(lease), AttrFlapping.Bool(flapping)))
	}
}

// StaleTokenRejected records a fence's refusal.
func (m *Metrics) StaleTokenRejected(ctx context.Context, resource string) {
	if m != nil {
		m.rejections.Add(ctx, 1, metric.WithAttributes(AttrResource.String(resource)))
	}
}

// ClockOffset records the estimated offset to peer and the margin it must
// stay within.
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
