// Package telemetry holds what leased's packages share for OpenTelemetry:
// every span and metric attribute key ([AttrName], [AttrToken], …) and
// every metric name ([MetricRenewalDuration], …), defined here once; W3C
// trace-context propagation in NATS message headers ([Inject],
// [Extract]), the lease metrics ([Metrics]: renewal latency and failures,
// expiries during work, ownership changes, fence rejections, clock offset,
// live leases) and flapping detection ([FlapDetector]).
//
// Libraries take providers as options and default to the OTel globals; only
// commands install exporters, through the subpackage
// [github.com/leased/leased/telemetry/otelsetup].
//
// # What it guarantees
//
// Each attribute key and metric name is defined here only, so every
// package and process spells it alike. No metric label grows with the
// leases: never a holder, a fenced resource or a work item, and a lease
// name only for the prefixes an operator opts in ([WithLeaseNamePrefixes]);
// the clock gauges are labelled by peer, a grantor node or gossip member. Every
// [Metrics] method is a no-op on a nil *Metrics. A [FlapDetector] keeps
// memory bounded by the leases granted in its last two windows, and
// forgets the others on its own.
//
// # What it does not do
//
// Telemetry is evidence, never input to a decision: no lease, fence or
// election consults a metric, a span or the flap detector. Trace context
// rides only in the headers of messages that carry it; a request without
// a traceparent starts a trace of its own. Counts are per process (in a
// cluster, per grantor node): they are not to be summed across nodes that
// watch the same bucket.
package telemetry
