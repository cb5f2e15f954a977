package otelsetup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/go-logr/logr"
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

	"github.com/leased/leased/kvlease/redact"
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
//   - A malformed endpoint (not an http:// or https:// URL with a host:
//     "localhost:4318", say) or header variable (not key=value,…, values
//     URL-escaped: "Authorization: Bearer …", say) turns off that signal's
//     OTLP export, with a warning on log that names the variable but not
//     its value; the program runs on. (The SDK would log the value, a
//     header's token or a URL's password, and send to
//     https://localhost:4318 or without the header.)
//
// Metrics are also kept for a Prometheus scrape: see MetricsHandler.
// OpenTelemetry's own errors (an exporter that cannot reach its endpoint)
// go to log as warnings (nil: slog's default logger), and the SDK's own log
// lines to log too, not to a standard logger, whose lines would break a
// JSON log.
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
	// The SDK's own log (a variable it cannot parse, say) goes to log too,
	// in its format, rather than to a standard logger of its own on stderr.
	otel.SetLogger(logr.FromSlogHandler(log.Handler()))
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
	traces, metrics := otlpConfigured("TRACES"), otlpConfigured("METRICS")
	// A malformed endpoint or header variable turns that signal's export
	// off, with a warning that names the variable but not its value: the
	// SDK would log the value itself (an Authorization header's token, a
	// URL's password) and fall back to https://localhost:4318.
	if traces {
		if err := checkOTLPEnv("TRACES"); err != nil {
			log.Warn("telemetry: traces are not exported", "err", err)
			traces = false
		}
	}
	if metrics {
		if err := checkOTLPEnv("METRICS"); err != nil {
			log.Warn("telemetry: metrics are not exported over OTLP (the Prometheus endpoint still serves them)", "err", err)
			metrics = false
		}
	}
	if traces {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, err
		}
		p.sdkTrace = sdktrace.NewTracerProvider(sdktrace.WithResource(res), sdktrace.WithBatcher(exp))
		p.Tracer = p.sdkTrace
	}
	if metrics {
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

// checkOTLPEnv checks the OTLP variables the exporter of signal (TRACES or
// METRICS) reads that the SDK would otherwise parse with a log line of the
// value and a fallback: the endpoints (an http:// or https:// URL with a
// host) and the headers (key=value pairs, comma-separated, values
// URL-escaped). Its errors name the variable, never a header's value or a
// URL's password.
func checkOTLPEnv(signal string) error {
	var errs []error
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			if err := checkEndpoint(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%s: %w", name, redact.OneURL(v), err))
			}
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_" + signal + "_HEADERS"} {
		if v := strings.TrimSpace(os.Getenv(name)); v != "" {
			if err := checkHeaders(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

func checkEndpoint(v string) error {
	u, err := url.Parse(v)
	if err != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) || u.Host == "" {
		return errors.New("not an http:// or https:// URL with a host (e.g. http://localhost:4318; OTLP/HTTP only)")
	}
	return nil
}

// checkHeaders checks v as the SDK parses it (key=value,…, the value
// URL-escaped), saying which entry is wrong without its value.
func checkHeaders(v string) error {
	entries := strings.Split(v, ",")
	for i, e := range entries {
		if strings.TrimSpace(e) == "" {
			continue // skipped by the SDK too ("a=b," or "a=b,,c=d": review)
		}
		k, val, ok := strings.Cut(e, "=")
		if !ok {
			return fmt.Errorf("entry %d of %d has no '=' (the form is key=value,key2=value2, values URL-escaped; the value is not shown)", i+1, len(entries))
		}
		k = strings.TrimSpace(k)
		if !validHeaderKey(k) {
			return fmt.Errorf("entry %d of %d: the key is not an HTTP header name (the form is key=value,key2=value2; the value is not shown)", i+1, len(entries))
		}
		if _, err := url.PathUnescape(val); err != nil {
			return fmt.Errorf("header %q: the value is not URL-escaped correctly (a %% must begin %%XX; the value is not shown)", k)
		}
	}
	return nil
}

// validHeaderKey: a token of RFC 9110, as the SDK checks it.
func validHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range k {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", c):
		default:
			return false
		}
	}
	return true
}
