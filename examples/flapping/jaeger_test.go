package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry/otelsetup"
)

// jaegerBin finds the Jaeger binary that .ci/run builds from
// tools/jaeger (Jaeger v1.76.0 from the Go module proxy).
func jaegerBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LEASED_JAEGER"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../../tools/bin/jaeger")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no Jaeger binary: build it with (cd tools/jaeger && go build -o ../bin/jaeger github.com/jaegertracing/jaeger/cmd/jaeger); .ci/run does")
	}
	return p
}

// The flapping example against a real Jaeger: the changes of holder and the
// flapping flag are in the traces Jaeger stores, found through its HTTP API.
func TestFlappingVisibleInJaeger(t *testing.T) {
	bin := jaegerBin(t)
	jaeger := exec.Command(bin)
	jaeger.Dir = t.TempDir()
	var jlog bytes.Buffer
	jaeger.Stdout, jaeger.Stderr = &jlog, &jlog
	if err := jaeger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = jaeger.Process.Kill(); _ = jaeger.Wait() })
	const query = "http://127.0.0.1:16686"
	// Jaeger announces readiness on no channel we can wait on: ask its API.
	ready := false
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(query + "/api/services"); err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
			if ready {
				break
			}
		}
	}
	if !ready {
		t.Fatalf("Jaeger did not start:\n%s", jlog.String())
	}

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_METRICS_EXPORTER", "none") // Jaeger takes traces only
	tel, err := otelsetup.Setup(t.Context(), "leased-flapping", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := kvleasetest.NewServer(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, srv.ClientURL(), 6); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil { // flush
		t.Fatal(err)
	}

	type span struct {
		OperationName string `json:"operationName"`
		Tags          []struct {
			Key   string `json:"key"`
			Value any    `json:"value"`
		} `json:"tags"`
		References []struct {
			RefType string `json:"refType"`
		} `json:"references"`
	}
	var traces struct {
		Data []struct {
			Spans []span `json:"spans"`
		} `json:"data"`
	}
	// Spans reach Jaeger's storage asynchronously after the flush: ask until
	// they are all there.
	var changes, flapping, linked int
	holders := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		resp, err := http.Get(query + "/api/traces?service=leased-flapping&operation=lease.ownership_change&limit=100&lookback=1h")
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&traces)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		changes, flapping, linked = 0, 0, 0
		for _, tr := range traces.Data {
			for _, s := range tr.Spans {
				if s.OperationName != "lease.ownership_change" {
					continue
				}
				changes++
				if len(s.References) > 0 {
					linked++
				}
				for _, tag := range s.Tags {
					switch {
					case tag.Key == "lease.flapping" && tag.Value == true:
						flapping++
					case tag.Key == "lease.holder":
						holders[tag.Value.(string)] = true
					}
				}
			}
		}
		if changes >= 6 && flapping > 0 {
			break
		}
	}
	t.Logf("Jaeger holds %d ownership changes (%d flagged flapping, %d linked to their grant) by %v", changes, flapping, linked, holders)
	if changes < 6 || flapping == 0 || len(holders) != 2 {
		t.Fatalf("in Jaeger: %d ownership changes, %d flapping, holders %v; want ≥ 6, some flapping, two holders", changes, flapping, holders)
	}
}
