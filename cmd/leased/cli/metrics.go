package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
	"github.com/leased/leased/telemetry/otelsetup"
)

// metricsFlags is --metrics-listen and --pprof, shared by serve and the
// holders we ship (run, elect, register).
type metricsFlags struct {
	listen string
	pprof  bool
	// health, if set, is served at /healthz (serve's; see healthCheck).
	health *healthCheck
}

// healthCheck is what /healthz on --metrics-listen answers, for a load
// balancer's or an orchestrator's probe (Kubernetes' readiness probe,
// compose's healthcheck): 200 "ok" while check finds nothing wrong, 503
// and what is wrong otherwise. Until set, the process is starting.
type healthCheck struct {
	mu    sync.Mutex
	check func() error
}

// errStarting is /healthz's answer before serve is ready.
var errStarting = errors.New("starting")

func (h *healthCheck) set(check func() error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.check = check
}

func (h *healthCheck) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	check := h.check
	h.mu.Unlock()
	err := errStarting
	if check != nil {
		err = check()
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "unavailable: %v\n", err)
		return
	}
	fmt.Fprintln(w, "ok")
}

func (m *metricsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&m.listen, "metrics-listen", "", "serve Prometheus metrics on http://HOST:PORT/metrics (default: off)")
	fs.BoolVar(&m.pprof, "pprof", false, "also serve Go's runtime profiles at /debug/pprof/ on --metrics-listen (default: off; "+
		"they show the process's internals and a CPU profile costs it CPU: keep the address private)")
}

// start sets up OpenTelemetry for the process (OTLP from the standard
// OTEL_* variables; see otelsetup.Setup) and, with --metrics-listen, serves
// the metrics for Prometheus at /metrics, logging the URL ("metrics" line).
// It returns the meter provider to record on and a stop function that
// closes the listener and flushes the exporters.
func (m *metricsFlags) start(ctx context.Context, service string, log *slog.Logger, attrs ...attribute.KeyValue) (metric.MeterProvider, func(), error) {
	tel, err := otelsetup.Setup(ctx, service, log, attrs...)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: %w", err)
	}
	shutdown := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}
	if m.listen == "" {
		if m.pprof {
			shutdown()
			return nil, nil, usageError{errors.New("--pprof needs --metrics-listen: the profiles are served beside the metrics")}
		}
		return tel.Meter, shutdown, nil
	}
	ln, err := net.Listen("tcp", m.listen)
	if err != nil {
		shutdown()
		return nil, nil, listenError("--metrics-listen", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", tel.MetricsHandler())
	if m.health != nil {
		mux.Handle("GET /healthz", m.health)
	}
	if m.pprof {
		// What net/http/pprof registers on http.DefaultServeMux, on this
		// listener only.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", redactedCmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	hs, served := serveHTTP(ln, "--metrics-listen", mux, nil)
	log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	if m.health != nil {
		log.Info("health", "url", "http://"+ln.Addr().String()+"/healthz")
	}
	if m.pprof {
		log.Info("profiles", "url", "http://"+ln.Addr().String()+"/debug/pprof/")
	}
	return tel.Meter, func() { _ = hs.Close(); <-served; shutdown() }, nil
}

// redactedCmdline is pprof.Cmdline with the values of the flags that
// carry a secret (--password, --secret) and the passwords and tokens in
// URLs as xxxxx: the listener has no authorization, and pprof.Cmdline
// served the NATS password given with --password to anyone reaching it.
func redactedCmdline(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprint(w, strings.Join(redactArgs(os.Args), "\x00"))
}

// secretFlags are the flags whose values redactArgs hides.
var secretFlags = []string{"--password", "--secret"}

// redactArgs returns args with the values of secretFlags (as "--flag V"
// or "--flag=V") replaced by xxxxx, and every other argument through
// redact.URL.
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	hideNext := false
	for i, a := range args {
		switch {
		case hideNext:
			out[i], hideNext = "xxxxx", false
		case slices.Contains(secretFlags, a):
			out[i], hideNext = a, true
		default:
			out[i] = redact.URL(a)
			if name, _, ok := strings.Cut(a, "="); ok && slices.Contains(secretFlags, name) {
				out[i] = name + "=xxxxx"
			}
		}
	}
	return out
}

// startMetrics starts a holder command's telemetry (see metricsFlags.start)
// and makes c's client and keepers record on it: renewal latency and
// failures, expiries during work, and (through the service) the clock
// offset to the grantor. The process is service.instance.id HOST-PID
// (OTEL_RESOURCE_ATTRIBUTES may say otherwise): without it the holders of a
// service pushed over OTLP are one series, each process's counters
// overwriting the others'.
func (c *connFlags) startMetrics(ctx context.Context, m metricsFlags, service string, stderr io.Writer) (func(), error) {
	log, _ := newLogger(stderr, "text", slog.LevelInfo)
	mp, stop, err := m.start(ctx, service, log, semconv.ServiceInstanceID(defaultHolder()))
	if err != nil {
		return nil, err
	}
	c.meter = mp
	return stop, nil
}

// keeperOptions are the options every keeper of c's commands takes.
func (c *connFlags) keeperOptions() []kvlease.KeeperOption {
	if c.meter == nil {
		return nil
	}
	return []kvlease.KeeperOption{kvlease.WithMeterProvider(c.meter)}
}
