package main_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/leased/leased/grantor/api"
)

// readmeMetrics parses the README's metrics table: for each process
// (serve, run, elect, register), the Prometheus names it must expose.
func readmeMetrics(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	in := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| metric | Prometheus name | exposed by |"):
			in = true
			continue
		case !in || strings.HasPrefix(line, "|---"):
			continue
		case !strings.HasPrefix(line, "|"):
			in = false
			continue
		}
		cols := strings.Split(line, "|")
		if len(cols) < 5 {
			t.Fatalf("README metrics row %q: want metric | Prometheus name | exposed by | what", line)
		}
		for _, p := range strings.Split(cols[3], ",") {
			p = strings.TrimSpace(p)
			if !slices.Contains([]string{"serve", "run", "elect", "register"}, p) {
				continue // exposed by the user's own program
			}
			for _, m := range names.FindAllStringSubmatch(cols[2], -1) {
				out[p] = append(out[p], m[1])
			}
		}
	}
	for _, p := range []string{"serve", "run", "elect", "register"} {
		if len(out[p]) == 0 {
			t.Fatalf("README metrics table names no metric for %s (parsed %v)", p, out)
		}
	}
	return out
}

// metricsURL waits for a process's "metrics" log line (JSON for serve, text
// for the holders) and returns its URL.
func metricsURL(t *testing.T, logs *lines) string {
	t.Helper()
	re := regexp.MustCompile(`"?url"?[=:]"?(http://[^"\s]+/metrics)`)
	line := logs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, "metrics") && re.MatchString(l) })
	return re.FindStringSubmatch(line)[1]
}

// startHolder starts a holder command with --metrics-listen and returns
// its metrics URL.
func startHolder(t *testing.T, url string, args ...string) string {
	t.Helper()
	i := slices.Index(args, "--")
	if i < 0 {
		i = len(args)
	}
	args = slices.Insert(args, i, "--url", url, "--metrics-listen", "127.0.0.1:0")
	cmd := exec.Command(leasedBin, args...)
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return metricsURL(t, readLines(stderr))
}

// Every metric the README's table promises is on the /metrics page of the
// process it names: serve, run, elect, register (real processes).
func TestMetricsWhereREADMESays(t *testing.T) {
	want := readmeMetrics(t)
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0", "--metric-name-prefixes", "m.run")
	urls := map[string]string{"serve": metricsURL(t, s.logs)}
	urls["run"] = startHolder(t, s.url, "run", "--lease", "m.run", "--ttl", "3s", "--", "sleep", "60")
	urls["elect"] = startHolder(t, s.url, "elect", "m.elect", "--ttl", "3s", "--", "sleep", "60")
	urls["register"] = startHolder(t, s.url, "register", "web", "m1", "--addr", "127.0.0.1:8080", "--ttl", "3s")
	if r := leased(t, s.url, "acquire", "m.other", "--ttl", "10s"); r.code != 0 {
		t.Fatal(r.stderr)
	}

	// A metric appears once something is recorded: renewals come at D/3
	// (1 s here), and the grantor's watch applies changes on its own. There
	// is no event for "recorded" outside the process: scrape until all are
	// there, for at most 20 s.
	pages := map[string]string{}
	missing := func(proc string) []string {
		var m []string
		for _, name := range want[proc] {
			if !strings.Contains(pages[proc], "# TYPE "+name+" ") {
				m = append(m, name)
			}
		}
		return m
	}
	for proc, u := range urls {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get(u)
			if err != nil {
				t.Fatalf("%s: %v", proc, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			pages[proc] = string(b)
			if len(missing(proc)) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if m := missing(proc); len(m) > 0 {
			t.Errorf("%s exposes none of %v, which the README promises:\n%s", proc, m, pages[proc])
		}
		// And the table leaves nothing out: every leased metric the
		// process exposes is in its rows.
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (leased_\w+) `).FindAllStringSubmatch(pages[proc], -1) {
			if !slices.Contains(want[proc], m[1]) {
				t.Errorf("%s exposes %s, which the README's table does not list for it", proc, m[1])
			}
		}
	}
	// Ownership changes carry lease.name only for --metric-name-prefixes.
	if !strings.Contains(pages["serve"], `lease_name="m.run"`) || strings.Contains(pages["serve"], `lease_name="m.other"`) ||
		strings.Contains(pages["serve"], `lease_name="svc.web.m1"`) {
		t.Errorf("lease.name labels do not follow --metric-name-prefixes m.run:\n%s", pages["serve"])
	}
}

// Error replies are counted in the service's micro stats (the data of each
// endpoint; micro's own num_errors cannot see them).
func TestMicroStatsCountErrors(t *testing.T) {
	s := startServe(t, "")
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	const bad = 24
	for i := range bad {
		body := `{"name":"x","holder":"h","ttl":"1ms"}` // ttl_out_of_range
		if i%2 == 1 {
			body = `{"name":"x","holder":"h","nope":1}` // invalid_argument
		}
		m, err := nc.Request(api.SubjectGrant, []byte(body), 5*time.Second)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) == "" {
			t.Fatalf("bad grant %d: %v %v", i, m, err)
		}
	}
	m, err := nc.Request("$SRV.STATS.leased", nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var stats micro.Stats
	if err := json.Unmarshal(m.Data, &stats); err != nil {
		t.Fatal(err)
	}
	for _, e := range stats.Endpoints {
		if e.Subject != api.SubjectGrant {
			continue
		}
		var es struct { // the wire form of api.EndpointStats
			Errors       int64            `json:"errors"`
			ErrorsByCode map[string]int64 `json:"errors_by_code"`
		}
		if err := json.Unmarshal(e.Data, &es); err != nil {
			t.Fatalf("grant endpoint stats data %q: %v", e.Data, err)
		}
		if es.Errors != bad || es.ErrorsByCode[api.CodeTTLOutOfRange] != bad/2 || es.ErrorsByCode[api.CodeInvalidArgument] != bad/2 {
			t.Fatalf("grant endpoint stats %+v after %d error replies", es, bad)
		}
		return
	}
	t.Fatalf("no %s endpoint in %s", api.SubjectGrant, m.Data)
}

// OpenTelemetry's own errors (here: an OTLP endpoint that refuses
// connections) go through serve's logger: with --log-format json every line
// serve writes stays JSON. They went to Go's standard logger, as plain text.
func TestServeTelemetryErrorsAreLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close() // nothing listens there now
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+refused)
	t.Setenv("OTEL_METRIC_EXPORT_INTERVAL", "100") // ms: the first export fails at once
	s := startServe(t, "")
	s.logs.wait(t, 30*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"telemetry"`) })
	for l := range strings.Lines(s.logs.text()) {
		if !json.Valid([]byte(l)) {
			t.Fatalf("serve --log-format json wrote a line that is not JSON: %q", l)
		}
	}
}

// A run whose lease is lost while its command works counts an expiry
// during work, which its metrics show while it stops the command (it
// counted none: only a program calling Lease.Check did; found by an
// outside client).
func TestRunCountsALossDuringWork(t *testing.T) {
	s := startServe(t, "")
	cmd := exec.Command(leasedBin, "run", "--url", s.url, "--metrics-listen", "127.0.0.1:0", "--lease", "m.lost",
		"--ttl", "30s", "--grace", "3s", "--", "sh", "-c", `trap "" TERM; exec sleep 60`)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	logs := readLines(stderr)
	u := metricsURL(t, logs)
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "command started") })
	if r := leased(t, s.url, "revoke", "m.lost"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	logs.wait(t, 10*time.Second, func(l string) bool { return strings.Contains(l, "lease lost") })
	// The command ignores SIGTERM: run waits out its 3 s grace, serving
	// its metrics meanwhile.
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^leased_expiries_during_work_total\{[^}]*\} 1$`).Match(b) {
		t.Errorf("run's metrics after the loss, while it stops the command: no expiry during work counted:\n%s", b)
	}
}

// --metrics-listen on a loopback address answers only requests for
// localhost or an IP address, as the timeline page does: it answered any
// Host, so a site the operator visited could rebind its name to 127.0.0.1
// and read the metrics and, with --pprof, the command line and profiles
// through the operator's browser (DNS rebinding).
func TestServeMetricsAnswersLoopbackHostsOnly(t *testing.T) {
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0", "--pprof")
	base := strings.TrimSuffix(metricsURL(t, s.logs), "metrics")
	port := strings.TrimSuffix(base[strings.LastIndexByte(base, ':')+1:], "/")
	get := func(host, path string) (int, string) { t.Helper(); return getAsHost(t, base+path, host) }
	for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.nip.io:" + port, "localhost.evil.example:" + port} {
		for _, path := range []string{"metrics", "healthz", "debug/pprof/", "debug/pprof/cmdline", "nothing"} {
			code, body := get(host, path)
			if code != http.StatusMisdirectedRequest || strings.Contains(body, "leased_") || strings.Contains(body, "metrics-listen\x00") ||
				!strings.Contains(body, "DNS rebinding") {
				t.Errorf("Host %s, GET /%s: %d %.200q, want 421 and nothing of the process", host, path, code, body)
			}
		}
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "metrics.localhost:" + port, "[::1]:" + port, "127.0.0.1"} {
		for _, tc := range []struct{ path, want string }{
			{"metrics", "leased_"}, {"healthz", "ok"}, {"debug/pprof/cmdline", "--metrics-listen"},
		} {
			if code, body := get(host, tc.path); code != http.StatusOK || !strings.Contains(body, tc.want) {
				t.Errorf("Host %s, GET /%s: %d %.200q, want 200 with %q", host, tc.path, code, body, tc.want)
			}
		}
	}
}

// --metrics-listen's connections are bounded and idle ones closed, as the
// timeline page's are: a client holding idle keep-alive connections to
// it, without end, could take every file descriptor of serve's process,
// which its NATS server shares.
func TestServeMetricsConnectionsBounded(t *testing.T) {
	s := startServe(t, "", "--metrics-listen", "127.0.0.1:0")
	u := metricsURL(t, s.logs)
	checkConnectionsBounded(t, s, strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/metrics"), "/healthz")
}
