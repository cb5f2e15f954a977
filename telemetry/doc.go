// Package telemetry holds what leased's packages share for OpenTelemetry:
// trace-context propagation in NATS message headers. Exporter set-up, the
// lease metrics and flapping detection follow (issue 7). Libraries take
// providers as options and default to the OTel globals; only cmd installs
// exporters.
package telemetry
