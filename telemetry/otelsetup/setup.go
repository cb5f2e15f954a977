package otelsetup

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	promexporter "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/leased/leased/telemetry"
)

// Providers are the tracer and meter providers Setup installed.
type Providers struct {
	// Tracer is the SDK's provider if spans are exported, else one whose
	// spans record nothing but have the span contexts the SDK would give
	// them (trace and span IDs, sampled flag, trace state), so that
	// traceparents stored or sent are as with the SDK.
	Tracer   trace.TracerProvider
	Meter    *sdkmetric.MeterProvider
	registry *prometheus.Registry
	sdkTrace *sdktrace.TracerProvider // nil if no span is exported
}

// Setup configures OpenTelemetry from the standard environment variables
// and installs the providers as the globals. Only commands call it;
// libraries take providers as options.
//
//   - OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_/_METRICS_ variants): traces
//     and metrics go there over OTLP/HTTP (e.g. http://localhost:4318 for
//     Jaeger). Unset: no spans are exported.
//   - OTEL_TRACES_EXPORTER=none or OTEL_METRICS_EXPORTER=none turns one off
//     (Jaeger accepts traces only).
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the service
//     (default service name: the given one).
//
// Metrics are also kept for a Prometheus scrape: see MetricsHandler.
// OpenTelemetry's own errors (an exporter that cannot reach its endpoint)
// go to log as warnings (nil: slog's default logger), not to the standard
// logger, whose lines would break a JSON log.
//
// attrs describe the process further (semconv.ServiceInstanceID, say: which
// node of a cluster answered); the variables override them.
func Setup(ctx context.Context, serviceName string, log *slog.Logger, attrs ...attribute.KeyValue) (*Providers, error) {
	if log == nil {
		log = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("telemetry", "err", err)
	}))
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(append([]attribute.KeyValue{semconv.ServiceName(serviceName)}, attrs...)...))
	if err != nil {
		return nil, err
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	p := &Providers{registry: prometheus.NewRegistry()}
	prom, err := promexporter.New(promexporter.WithRegisterer(p.registry))
	if err != nil {
		return nil, err
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(prom)}
	p.Tracer = idProvider{}
	if otlpConfigured("TRACES") {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		p.sdkTrace = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		p.Tracer = p.sdkTrace
	}
	if otlpConfigured("METRICS") {
		exp, err := otlpmetrichttp.New(ctx)
		if err != nil {
			return nil, err
		}
		mopts = append(mopts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	p.Meter = sdkmetric.NewMeterProvider(mopts...)
	otel.SetTracerProvider(p.Tracer)
	otel.SetMeterProvider(p.Meter)
	otel.SetTextMapPropagator(telemetry.Propagator)
	return p, nil
}

// otlpConfigured: an OTLP endpoint is set for signal, and OTEL_<signal>_EXPORTER
// does not say "none" (Jaeger, for one, takes traces but not metrics).
func otlpConfigured(signal string) bool {
	if os.Getenv("OTEL_"+signal+"_EXPORTER") == "none" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
}

// MetricsHandler serves the metrics in the Prometheus text format.
func (p *Providers) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
}

// Shutdown flushes and stops the providers.
func (p *Providers) Shutdown(ctx context.Context) error {
	var err error
	if p.sdkTrace != nil {
		err = p.sdkTrace.Shutdown(ctx)
	}
	return errors.Join(err, p.Meter.Shutdown(ctx))
}
