package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// leasedBin is the binary under test, built once (with -race) in TestMain.
var leasedBin string

// plainBin is the same binary without the race detector, built on first
// use, for the tests whose figures are timings: the race detector slows a
// process several times over, and gossip's timeouts with it.
var plainBin = sync.OnceValues(func() (string, error) {
	bin := leasedBin + "-plain"
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build leased: %v\n%s", err, out)
	}
	return bin, nil
})

func timingBin(t *testing.T) string {
	t.Helper()
	bin, err := plainBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(envNemesisHolder); spec != "" {
		if err := runNemesisHolder(spec); err != nil {
			fmt.Fprintf(os.Stderr, "nemesis holder: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "leased-bin")
	if err != nil {
		panic(err)
	}
	leasedBin = filepath.Join(dir, "leased")
	// The race runtime sleeps a second before a process exits; the CLI's
	// processes exit often.
	os.Setenv("GORACE", "atexit_sleep_ms=0")
	if out, err := exec.Command("go", "build", "-race", "-o", leasedBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build leased: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is a running `leased serve` process.
type server struct {
	cmd  *exec.Cmd
	url  string
	data string
	logs *lines
}

// startServe starts `leased serve` on a free port with data in dir (a new
// temporary directory if empty) and waits until it is ready.
func startServe(t *testing.T, dir string, args ...string) *server {
	t.Helper()
	return startServeWith(t, leasedBin, dir, args...)
}

// startServeWith is startServe with another binary.
func startServeWith(t *testing.T, bin, dir string, args ...string) *server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--data", dir, "--log-format", "json"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := &server{cmd: cmd, data: dir, logs: readLines(stderr)}
	line := s.logs.wait(t, 20*time.Second, func(l string) bool { return strings.Contains(l, `"msg":"ready"`) })
	var ready struct{ URL string }
	if err := json.Unmarshal([]byte(line), &ready); err != nil || ready.URL == "" {
		t.Fatalf("ready line %q: %v", line, err)
	}
	s.url = ready.URL
	return s
}

// serveOn starts `leased serve --nats-url url` with args (its page on a
// free port, JSON logs), killed on cleanup, and returns its log lines as
// they come.
func serveOn(t *testing.T, url string, args ...string) *lines {
	t.Helper()
	cmd := exec.Command(leasedBin, append([]string{"serve", "--nats-url", url, "--http-listen", "127.0.0.1:0", "--log-format", "json"}, args...)...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return readLines(stderr)
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := waitExit(s.cmd, 10*time.Second); err != nil {
		t.Fatalf("leased serve after SIGTERM: %v", err)
	}
}

// pause stops the server (SIGSTOP) until the returned resume is called,
// or the test ends.
func (s *server) pause(t *testing.T) (resume func()) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume = sync.OnceFunc(func() { _ = s.cmd.Process.Signal(syscall.SIGCONT) })
	t.Cleanup(resume)
	return resume
}

// startCLI starts the CLI with args, killed when the test ends, and
// returns it, its standard input and the lines of its output and errors.
func startCLI(t *testing.T, args ...string) (*exec.Cmd, io.WriteCloser, *lines, *lines) {
	t.Helper()
	cmd := exec.Command(leasedBin, args...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, stdin, readLines(stdout), readLines(stderr)
}

// waitExit waits for cmd to exit, killing it after timeout.
func waitExit(cmd *exec.Cmd, timeout time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done // one Wait at a time: a cleanup's Wait raced with this one
		return errors.New("did not exit in time")
	}
}

// result of one CLI invocation.
type result struct {
	stdout, stderr string
	code           int
}

// leased runs the CLI against url and returns what it printed and its exit code.
func leased(t *testing.T, url string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, leasedBin, args...)
	cmd.Env = append(os.Environ(), "LEASED_URL="+url)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("leased %v: %v", args, err)
	}
	return r
}

// lines collects a reader's lines as they arrive.
type lines struct {
	mu    sync.Mutex
	all   []string
	at    []time.Time // when each line was read
	added chan struct{}
}

func readLines(r io.Reader) *lines {
	l := &lines{added: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			l.mu.Lock()
			l.all, l.at = append(l.all, sc.Text()), append(l.at, time.Now())
			l.mu.Unlock()
			select {
			case l.added <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

// wait returns the first line (old or new) that matches, failing after timeout.
func (l *lines) wait(t *testing.T, timeout time.Duration, match func(string) bool) string {
	t.Helper()
	line, _ := l.waitAt(t, timeout, match)
	return line
}

// waitAt is wait that also returns when the line was read.
func (l *lines) waitAt(t *testing.T, timeout time.Duration, match func(string) bool) (string, time.Time) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for seen := 0; ; {
		l.mu.Lock()
		for ; seen < len(l.all); seen++ {
			if match(l.all[seen]) {
				line, at := l.all[seen], l.at[seen]
				l.mu.Unlock()
				return line, at
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-deadline.C:
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Fatalf("no matching line within %v; got:\n%s", timeout, strings.Join(l.all, "\n"))
			return "", time.Time{}
		}
	}
}

func (l *lines) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}
