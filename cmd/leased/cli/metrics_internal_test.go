package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
)

// /debug/pprof/cmdline on --metrics-listen (no authorization) shows the
// command line without its secrets: it served `serve --password PW`'s PW
// (and a password in --url) to anyone who reached the port.
func TestPprofCmdlineHidesSecrets(t *testing.T) {
	saved := os.Args
	t.Cleanup(func() { os.Args = saved })
	os.Args = []string{"leased", "serve", "--user", "leased", "--password", "pw1-SECRET",
		"--nats-url", "nats://leased:pw2-SECRET@127.0.0.1:4222,nats://tok3-SECRET@127.0.0.1:4223",
		"--password=pw4-SECRET", "--secret", "00ff-SECRET", "--metrics-listen", "127.0.0.1:0", "--pprof"}

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	m := metricsFlags{listen: "127.0.0.1:0", pprof: true}
	_, stop, err := m.start(context.Background(), "test", log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	u := regexp.MustCompile(`url=(http://\S+)/metrics`).FindStringSubmatch(logs.String())
	if u == nil {
		t.Fatalf("no metrics URL logged: %s", logs.String())
	}
	resp, err := http.Get(u[1] + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := strings.Split(string(body), "\x00")
	if strings.Contains(string(body), "SECRET") {
		t.Errorf("/debug/pprof/cmdline shows a secret: %q", got)
	}
	want := []string{"leased", "serve", "--user", "leased", "--password", "xxxxx",
		"--nats-url", "nats://leased:xxxxx@127.0.0.1:4222,nats://xxxxx@127.0.0.1:4223",
		"--password=xxxxx", "--secret", "xxxxx", "--metrics-listen", "127.0.0.1:0", "--pprof"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("/debug/pprof/cmdline = %q, want %q", got, want)
	}
}

// A holder command's telemetry names its process (service.instance.id
// HOST-PID): holders of one service that push over OTLP were one series
// (service.name alone), each process's counters overwriting the others'.
func TestHolderTelemetryNamesItsProcess(t *testing.T) {
	var logs bytes.Buffer
	c := &connFlags{}
	stop, err := c.startMetrics(context.Background(), metricsFlags{listen: "127.0.0.1:0"}, "leased-run", &logs)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	u := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(logs.String())
	if u == nil {
		t.Fatalf("no metrics URL logged: %s", logs.String())
	}
	resp, err := http.Get(u[1])
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `service_instance_id="` + defaultHolder() + `"`
	if !strings.Contains(string(body), want) {
		t.Errorf("target_info has no %s:\n%s", want, body)
	}
}
