package otelsetup

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain lets a test run Setup in a process of its own (helperEnv set):
// the SDK's own logger writes to that process's stderr, and the OTel globals
// Setup installs stay out of the other tests.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(setupHelper())
	}
	os.Exit(m.Run())
}

const helperEnv = "OTELSETUP_TEST_HELPER"

// setupHelper runs Setup with a JSON logger on stderr, as serve
// --log-format json does, and prints on stdout whether traces and metrics
// are exported over OTLP.
func setupHelper() int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	p, err := Setup(context.Background(), "test", log)
	if err != nil {
		fmt.Printf("error %v\n", err)
		return 1
	}
	fmt.Printf("traces=%v\n", p.sdkTrace != nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
	return 0
}

// runSetup runs setupHelper with env (OTEL_* variables) and returns its
// stdout and stderr.
func runSetup(t *testing.T, env ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "OTEL_METRICS_EXPORTER=none")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// TestBadOTLPEnvironment: a malformed OTLP endpoint or header variable is
// refused with a warning in the process's own log format that names the
// variable, never the header's value (a bearer token, here) or a URL's
// password, and spans are then not exported (not to the SDK's fallback,
// https://localhost:4318). Before, the SDK printed "parse headers" with the
// whole header, token included, and "parse url" with the URL, on a
// standard logger of its own (not JSON), and exported without the header or
// to localhost.
func TestBadOTLPEnvironment(t *testing.T) {
	const secret = "tok-SECRET-4711"
	for _, c := range []struct {
		name, variable string
		env            []string
	}{
		{"header written as HTTP writes it", "OTEL_EXPORTER_OTLP_HEADERS",
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_HEADERS=Authorization: Bearer " + secret}},
		{"header value badly escaped", "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS=x-team=a,Authorization=Bearer%zz" + secret}},
		{"endpoint without a scheme", "OTEL_EXPORTER_OTLP_ENDPOINT",
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=127.0.0.1:4318"}},
		{"endpoint host:port read as a scheme", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
			[]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=localhost:4318"}},
		{"endpoint with a password that does not parse", "OTEL_EXPORTER_OTLP_ENDPOINT",
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://u:" + secret + "@[::1"}},
		{"endpoint with a comma in a password that does not parse", "OTEL_EXPORTER_OTLP_ENDPOINT",
			[]string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://u:" + secret + ",x@[::1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stdout, stderr := runSetup(t, c.env...)
			if strings.Contains(stderr, secret) {
				t.Errorf("the log shows the secret:\n%s", stderr)
			}
			warned := false
			for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
				if line == "" {
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("a log line is not JSON: %s", line)
					continue
				}
				if rec["level"] == "WARN" && strings.Contains(fmt.Sprint(rec["err"]), c.variable) {
					warned = true
				}
			}
			if !warned {
				t.Errorf("no warning names %s:\n%s", c.variable, stderr)
			}
			if !strings.Contains(stdout, "traces=false") {
				t.Errorf("traces exported all the same: %s", stdout)
			}
		})
	}
}

// TestGoodOTLPEnvironment: well-formed variables export, with no warning.
func TestGoodOTLPEnvironment(t *testing.T) {
	stdout, stderr := runSetup(t, "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1",
		"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20x,,x-team=a,", // empty entries: the SDK skips them (review)
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=https://collector.example:4318/v1/traces")
	if !strings.Contains(stdout, "traces=true") {
		t.Errorf("traces not exported: %s", stdout)
	}
	if strings.Contains(stderr, "telemetry:") {
		t.Errorf("a warning for good variables:\n%s", stderr)
	}
}
