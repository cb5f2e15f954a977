package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The README sections whose every sh block must run as written.
var readmeSections = []string{"Quick start", "Service registration with auto-lapse", "Beyond one machine: a cluster"}

// readmeBlock is a ```sh block of README.md with the marker before it:
//
//	<!-- readme-test: run [expect="RE"] [until="RE"] -->    run it; it must exit 0 (and print RE)
//	<!-- readme-test: start [wait="RE"] -->                 start it, as in a shell of its own, and wait for RE in its output
//
// A run block with until is run again until it prints RE (only for blocks
// that change nothing, like discover or status). The processes a section
// starts are stopped with SIGINT, as Ctrl-C would, at the section's end.
type readmeBlock struct {
	section string
	line    int    // of the fence
	kind    string // "run", "start", or "" if unmarked
	attrs   map[string]*regexp.Regexp
	script  string
}

var (
	readmeMarker = regexp.MustCompile(`^<!-- readme-test: (run|start)((?: +[a-z]+="[^"]*")*) *-->$`)
	readmeAttr   = regexp.MustCompile(`([a-z]+)="([^"]*)"`)
)

func readmeBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []readmeBlock
	var section string
	var marker []string // of the line before a fence
	var cur *readmeBlock
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		switch {
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.script += line + "\n"
		case strings.HasPrefix(line, "```"):
			if strings.TrimPrefix(line, "```") == "sh" {
				cur = &readmeBlock{section: section, line: n, attrs: map[string]*regexp.Regexp{}}
				if marker != nil {
					cur.kind = marker[1]
					for _, a := range readmeAttr.FindAllStringSubmatch(marker[2], -1) {
						re, err := regexp.Compile(a[2])
						if err != nil {
							t.Fatalf("README.md:%d: %s=%q: %v", n-1, a[1], a[2], err)
						}
						cur.attrs[a[1]] = re
					}
				}
			} else if marker != nil {
				t.Fatalf("README.md:%d: a readme-test marker before a %q block", n-1, line)
			}
			marker = nil
		case strings.HasPrefix(line, "<!-- readme-test"):
			if marker = readmeMarker.FindStringSubmatch(line); marker == nil {
				t.Fatalf("README.md:%d: bad marker %q", n, line)
			}
		default:
			if marker != nil {
				t.Fatalf("README.md:%d: a readme-test marker must be the line before a ```sh fence", n-1)
			}
			if strings.HasPrefix(line, "#") {
				section = strings.TrimSpace(strings.TrimLeft(line, "#"))
			}
		}
	}
	return blocks
}

// Every sh block of the README's quick start, service registration and
// cluster sections is marked, and the marked blocks run as written, in
// order, with the binary under test as `leased`, `./leased` and `go run
// ./cmd/leased`. Where the test is root, every command runs in a network
// namespace of its own, so the README's fixed ports (4222, 7946, …) are free
// whatever else runs on this machine.
func TestReadmeExamples(t *testing.T) {
	var run []readmeBlock
	for _, b := range readmeBlocks(t) {
		if !slices.Contains(readmeSections, b.section) {
			continue
		}
		if b.kind == "" {
			t.Errorf("README.md:%d: a sh block in %q without a readme-test marker", b.line, b.section)
		}
		run = append(run, b)
	}
	for _, s := range readmeSections {
		if !slices.ContainsFunc(run, func(b readmeBlock) bool { return b.section == s }) {
			t.Errorf("README.md: no sh block in section %q", s)
		}
	}
	if t.Failed() {
		return
	}
	r := newReadmeRunner(t)
	for i, b := range run {
		r.block(b)
		if i+1 == len(run) || run[i+1].section != b.section {
			r.stopAll() // the user's Ctrl-C before the next section
		}
	}
}

type readmeRunner struct {
	t       *testing.T
	dir     string   // the working directory: ./data, ./cluster and ./leased land there
	env     []string // HOME in a temporary directory, PATH with the test's leased and go first
	netns   string   // "" runs on the host's network
	started []*readmeProc
}

type readmeProc struct {
	b      readmeBlock
	cmd    *exec.Cmd
	out    *lines
	exited chan struct{}
}

func newReadmeRunner(t *testing.T) *readmeRunner {
	r := &readmeRunner{t: t, dir: t.TempDir()}
	bin := t.TempDir()
	if err := os.Symlink(leasedBin, filepath.Join(bin, "leased")); err != nil {
		t.Fatal(err)
	}
	// `go run ./cmd/leased …` and `go build -o FILE ./cmd/leased`, the only
	// go commands these sections use, stand for the binary under test.
	shim := `#!/bin/sh
if [ "$1" = run ] && [ "$2" = ./cmd/leased ]; then shift 2; exec leased "$@"; fi
if [ "$1" = build ] && [ "$2" = -o ] && [ "$4" = ./cmd/leased ] && [ $# -eq 4 ]; then exec cp "$LEASED_TEST_BIN" "$3"; fi
echo "README test: no stand-in for: go $*" >&2
exit 1
`
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(shim), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH" || k == "HOME" || k == "XDG_DATA_HOME" || strings.HasPrefix(k, "LEASED_") || strings.HasPrefix(k, "OTEL_"):
		default:
			r.env = append(r.env, kv)
		}
	}
	r.env = append(r.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home, "LEASED_TEST_BIN="+leasedBin)
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("ip"); err == nil {
			ns := fmt.Sprintf("ldrm%d", os.Getpid()%100000)
			_ = exec.Command("ip", "netns", "del", ns).Run() // left by an earlier run with our pid
			if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
				t.Logf("no network namespace (%v: %s): the README's ports must be free on this host", err, out)
			} else {
				t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
				if out, err := exec.Command("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
					t.Fatalf("loopback in %s: %v: %s", ns, err, out)
				}
				r.netns = ns
			}
		}
	}
	t.Cleanup(r.stopAll)
	return r
}

// command runs script as a shell of its own would: in r.dir, in its own
// process group (what a terminal's Ctrl-C signals). The trap makes the
// shell outlive the command Ctrl-C stops, so that waiting for the shell
// waits for the command.
func (r *readmeRunner) command(ctx context.Context, b readmeBlock) *exec.Cmd {
	file := filepath.Join(r.t.TempDir(), "block.sh")
	script := fmt.Sprintf("# README.md:%d\ntrap : INT\nset -e\n%s", b.line, b.script)
	if err := os.WriteFile(file, []byte(script), 0o644); err != nil {
		r.t.Fatal(err)
	}
	args := []string{"sh", file}
	if r.netns != "" {
		args = append([]string{"ip", "netns", "exec", r.netns}, args...) // ip execs sh: the same process
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir, cmd.Env = r.dir, r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func (r *readmeRunner) block(b readmeBlock) {
	r.t.Helper()
	switch b.kind {
	case "start":
		r.start(b)
	case "run":
		r.run(b)
	}
}

// start starts a long-running block and waits for its wait pattern.
func (r *readmeRunner) start(b readmeBlock) {
	r.t.Helper()
	cmd := r.command(context.Background(), b)
	pr, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	p := &readmeProc{b: b, cmd: cmd, out: readLines(pr), exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	r.started = append(r.started, p)
	re := b.attrs["wait"]
	if re == nil {
		return
	}
	// A node built with -race on a loaded 2-core machine: up to a minute.
	if !p.waitLine(90*time.Second, re.MatchString) {
		out := p.out.text()
		if r.netns == "" && strings.Contains(out, "address already in use") {
			r.t.Skipf("README.md:%d needs a port that is busy on this host (and no network namespace could be made): %s", b.line, out)
		}
		r.t.Fatalf("README.md:%d: no line matching %q; the block (%s) printed:\n%s", b.line, re, exitState(p), out)
	}
}

// waitLine waits for a line of the process's output that matches, and
// reports false if the process exits or timeout passes first.
func (p *readmeProc) waitLine(timeout time.Duration, match func(string) bool) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	l, exited := p.out, p.exited
	for seen := 0; ; {
		l.mu.Lock()
		for ; seen < len(l.all); seen++ {
			if match(l.all[seen]) {
				l.mu.Unlock()
				return true
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-exited:
			exited = nil // read the lines still in the pipe, then give up
			deadline.Reset(time.Second)
		case <-deadline.C:
			return false
		}
	}
}

func exitState(p *readmeProc) string {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.String()
	default:
		return "still running"
	}
}

// run runs a block to its end: it must exit 0 and print what expect or
// until say.
func (r *readmeRunner) run(b readmeBlock) {
	r.t.Helper()
	until := b.attrs["until"]
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := r.command(ctx, b)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // anything it left behind
		}
		switch {
		case until != nil && (err != nil || !until.Match(out.Bytes())) && time.Now().Before(deadline):
			// What the block shows (a registration, a stream leader) has no
			// event to wait on from here: run it again.
			time.Sleep(500 * time.Millisecond)
			continue
		case err != nil:
			r.t.Fatalf("README.md:%d: %v; the block printed:\n%s", b.line, err, out.String())
		case until != nil && !until.Match(out.Bytes()):
			r.t.Fatalf("README.md:%d: nothing matching %q within 60 s; last output:\n%s", b.line, until, out.String())
		case b.attrs["expect"] != nil && !b.attrs["expect"].Match(out.Bytes()):
			r.t.Fatalf("README.md:%d: no output matching %q:\n%s", b.line, b.attrs["expect"], out.String())
		}
		r.t.Logf("README.md:%d ran:\n%s", b.line, firstLines(out.String(), 12))
		return
	}
}

func firstLines(s string, n int) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	for i := 0; sc.Scan() && i < n; i++ {
		b.WriteString("\t" + sc.Text() + "\n")
	}
	return b.String()
}

// stopAll stops the started blocks, the last started first (a registration
// deregisters through the grantor started before it), each with SIGINT to
// its process group as Ctrl-C in its shell would, waiting for each to exit
// cleanly (SIGKILL after 30 s).
func (r *readmeRunner) stopAll() {
	for _, p := range slices.Backward(r.started) {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-p.exited:
			if !p.cmd.ProcessState.Success() {
				r.t.Errorf("README.md:%d after Ctrl-C: %v:\n%s", p.b.line, p.cmd.ProcessState, p.out.text())
			}
		case <-time.After(30 * time.Second):
			r.t.Errorf("README.md:%d still running 30 s after Ctrl-C:\n%s", p.b.line, p.out.text())
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	r.started = nil
}

// The `leased bench` commands of README's "Benchmarking your deployment"
// load a deployment for seconds to minutes, so the tests do not run them
// to the end; they run each as written up to where it would connect: its
// flags must pass (exit 1, the server unreachable, never 2, a usage
// error). Only what names a machine changes: the URL is a closed port
// on 127.0.0.1, and --data the data directory of a serve of its own (bench
// checks that a serve holds its lock).
func TestReadmeBenchCommandsAreValid(t *testing.T) {
	data := t.TempDir()
	startServe(t, data)
	const closed = "nats://127.0.0.1:1"
	n := 0
	for _, b := range readmeBlocks(t) {
		if b.section != "Benchmarking your deployment" {
			continue
		}
		for i, line := range strings.Split(b.script, "\n") {
			line, _, _ = strings.Cut(line, " #")
			_, cmd, ok := strings.Cut(line, "leased bench ")
			if !ok {
				continue
			}
			args := append([]string{"bench"}, strings.Fields(cmd)...)
			for j := 1; j < len(args)-1; j++ {
				switch args[j] {
				case "--url":
					args[j+1] = closed
				case "--data":
					args[j+1] = data
				}
			}
			args = append(args, "--timeout", "200ms")
			n++
			t.Run(fmt.Sprintf("README.md:%d", b.line+1+i), func(t *testing.T) {
				r := leased(t, closed, args...)
				if r.code != 1 || !strings.Contains(r.stderr, "unavailable") {
					t.Errorf("leased %s: exit %d, %q; want exit 1, the server unavailable (the flags accepted)",
						strings.Join(args, " "), r.code, r.stderr)
				}
			})
		}
	}
	if n < 5 {
		t.Fatalf("%d leased bench commands in README's Benchmarking your deployment, want at least 5", n)
	}
}
