// Package telemetry will set up OpenTelemetry exporters, the lease metrics
// and flapping detection (issue 7). Until then the libraries emit spans to
// the tracer provider they are given (default: the global one).
package telemetry
