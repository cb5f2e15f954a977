// Package otelsetup installs OpenTelemetry exporters for the leased
// commands: OTLP/HTTP from the standard environment variables, and a
// Prometheus scrape handler. Libraries never import it.
//
// # What it guarantees
//
// [Setup] installs its tracer and meter providers and the propagator of
// [github.com/leased/leased/telemetry] as the OTel globals, which
// libraries default to. Without an OTLP endpoint in the environment
// nothing is sent anywhere; metrics are still kept for
// [Providers.MetricsHandler], and spans record nothing but carry the span
// contexts the SDK's default sampler would give them (traceparents stored
// in lease records or sent on are as with the SDK). [Providers.Shutdown] flushes what is
// batched.
//
// # What it does not do
//
// It exports over OTLP/HTTP only: no gRPC, no console exporter, whatever
// OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER says besides "none". An
// unreachable collector fails none of the program's calls: exports are
// batched in the background, and what cannot be sent is dropped.
package otelsetup
