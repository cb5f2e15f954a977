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
package telemetry
