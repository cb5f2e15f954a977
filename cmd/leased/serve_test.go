package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// buildLeased builds the binary once per test run.
func buildLeased(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leased")
	out, err := exec.Command("go", "build", "-race", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// A real `leased serve` process: it starts on a free port, opens the lease
// bucket, grants leases to a client, and exits cleanly on SIGTERM, keeping
// its data for the next start.
func TestServeProcess(t *testing.T) {
	bin := buildLeased(t)
	data := t.TempDir()
	start := func() (*exec.Cmd, string) {
		cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--data", data, "--log-format", "json")
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		url := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				var line struct{ Msg, URL string }
				if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "ready" {
					url <- line.URL
				}
			}
		}()
		select {
		case u := <-url:
			return cmd, u
		case <-time.After(20 * time.Second):
			t.Fatal("leased serve did not log ready")
		}
		return nil, ""
	}
	stopProc := func(cmd *exec.Cmd) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("leased serve exited with %v after SIGTERM", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("leased serve did not exit after SIGTERM")
		}
	}

	cmd, url := start()
	st := kvleasetest.OpenStore(t, url, kvlease.WithoutCreate())
	rec, err := st.Grant(context.Background(), kvlease.GrantRequest{Name: "svc.a", Holder: "h", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stopProc(cmd)

	// Restarted on the same data, the lease and its token are still there.
	cmd, url = start()
	st = kvleasetest.OpenStore(t, url, kvlease.WithoutCreate())
	got, err := st.Get(context.Background(), "svc.a")
	if err != nil || got.Token != rec.Token {
		t.Fatalf("after restart: %+v, %v; want token %d", got, err, rec.Token)
	}
	stopProc(cmd)
}

func TestServeRejectsBadFlags(t *testing.T) {
	bin := buildLeased(t)
	for _, args := range [][]string{
		{"serve", "--sync", "sometimes"},
		{"serve", "--listen", "nohostport"},
		{"serve", "--listen", "127.0.0.1:99999"},
		{"serve", "--log-format", "xml"},
		{"serve", "--no-such-flag"},
	} {
		err := exec.Command(bin, append(args, "--data", t.TempDir())...).Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("leased %v: %v, want exit code 2", args, err)
		}
	}
}
