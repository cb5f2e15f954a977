package main_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	colmetric "go.opentelemetry.io/proto/otlp/collector/metrics/v1"

	"github.com/leased/leased/kvlease/kvleasetest"
)

// metricSink is an OTLP/HTTP metrics receiver: it keeps the latest value
// of each integer sum, by service.name and metric name (summed over the
// metric's series), as the processes that export there last said it. It
// sees what a process recorded up to its exit, which flushes its metrics.
type metricSink struct {
	*otlpSink
	sums map[[2]string]int64 // guarded by mu
}

func startMetricSink(t *testing.T) *metricSink {
	t.Helper()
	s := &metricSink{sums: map[[2]string]int64{}}
	s.otlpSink = startOTLPSink(t, func() *colmetric.ExportMetricsServiceRequest { return new(colmetric.ExportMetricsServiceRequest) },
		&colmetric.ExportMetricsServiceResponse{}, s.record)
	return s
}

func (s *metricSink) record(req *colmetric.ExportMetricsServiceRequest) {
	for _, rm := range req.ResourceMetrics {
		service := ""
		for _, a := range rm.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.Value.GetStringValue()
			}
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if sum := m.GetSum(); sum != nil {
					var n int64
					for _, p := range sum.DataPoints {
						n += p.GetAsInt()
					}
					s.sums[[2]string{service, m.Name}] = n
				}
			}
		}
	}
}

// sum returns the latest value service exported for metric, and whether
// it exported it at all, once got accepts them or after a minute.
func (s *metricSink) sum(t *testing.T, service, metric string, got func(n int64, ok bool) bool) (n int64, ok bool) {
	t.Helper()
	s.until(func() bool {
		n, ok = s.sums[[2]string{service, metric}]
		return got(n, ok)
	})
	return n, ok
}

// A run stopped (SIGSTOP) past its lease's deadline, whose guard kills the
// command there, counts an expiry during work: the lease ended while the
// command worked. It counted none (found by an operator): run, resumed,
// saw the command's exit first, and counted only a loss it saw before.
func TestRunStoppedPastItsDeadlineCountsALossDuringWork(t *testing.T) {
	s := startServe(t, "")
	sink := startMetricSink(t)
	// Only run exports there (serve started without): its metrics as it exits.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "600000") // ms: run exports once, as it exits
	p := startRun(t, s.url, "--lease", "m.paused", "--ttl", "3s", "--", "sh", "-c", "echo child-pid=$$ >&2; exec sleep 60")
	command := p.childPID(t)
	kvleasetest.StopProcess(t, p.cmd.Process)
	defer p.cmd.Process.Signal(syscall.SIGCONT)
	// The guard kills the command at its deadline, a TTL away at most.
	waitGone(t, command, "the command, run stopped", 3*time.Second+5*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(p.cmd, 20*time.Second); err == nil {
		t.Fatalf("run exited 0 though its command was killed at its deadline\n%s", p.logs.text())
	}
	if n, ok := sink.sum(t, "leased-run", "leased.expiries_during_work", func(n int64, ok bool) bool { return ok }); n != 1 {
		t.Errorf("leased.expiries_during_work = %d (exported: %v), want 1: the lease ended while the command worked\n%s", n, ok, p.logs.text())
	}
}

// Two serves on one host using one NATS (--nats-url, no --name) are two
// OTLP instances: they exported under one service.instance.id, the host
// name, and a backend took their cumulative counters for one series, each
// process's values overwriting the other's (found by an operator, as
// the holders' was: their service.instance.id is HOST-PID for the same
// reason). Without --name such a serve is HOST-PID, as its gossip name.
func TestServesOnOneHostExportApart(t *testing.T) {
	nats := startServe(t, "")  // the NATS server the other two use; it exports nothing
	ids := map[string]string{} // test.process -> service.instance.id; guarded by sink.mu
	sink := startOTLPSink(t, func() *colmetric.ExportMetricsServiceRequest { return new(colmetric.ExportMetricsServiceRequest) },
		&colmetric.ExportMetricsServiceResponse{}, func(req *colmetric.ExportMetricsServiceRequest) {
			for _, rm := range req.ResourceMetrics {
				var proc, id string
				for _, a := range rm.GetResource().GetAttributes() {
					switch a.Key {
					case "test.process":
						proc = a.Value.GetStringValue()
					case "service.instance.id":
						id = a.Value.GetStringValue()
					}
				}
				if proc != "" {
					ids[proc] = id
				}
			}
		})
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "200") // ms
	for _, proc := range []string{"a", "b"} {
		t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "test.process="+proc) // tells the exports apart here only
		serveOn(t, nats.url).wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	}
	if !sink.until(func() bool { return ids["a"] != "" && ids["b"] != "" }) {
		t.Fatalf("metrics exported by serve a and b: %v", ids)
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if ids["a"] == ids["b"] {
		t.Errorf("both serves exported as service.instance.id %q: want one each", ids["a"])
	}
	host, _ := os.Hostname()
	for proc, id := range ids {
		if !strings.HasPrefix(id, host+"-") {
			t.Errorf("serve %s exported as service.instance.id %q, want %s-PID", proc, id, host)
		}
	}
}
