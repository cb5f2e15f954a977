package cli

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// run says, at its default level, when a renewal succeeds after failed
// ones. After "renewal failed; trying again … sigterm_in=…" its log said
// nothing more, and whether the command had been stopped or the lease
// kept could not be told from it (found trying it: the server restarted
// under run).
func TestRunSaysWhenARenewalSucceedsAfterFailures(t *testing.T) {
	g := kvleasetest.NewFakeGrantor()
	logR, logW := io.Pipe()
	lines := make(chan string, 64)
	go func() {
		defer close(lines)
		for s := bufio.NewScanner(logR); s.Scan(); {
			lines <- s.Text()
		}
	}()
	next := func(want string) string {
		t.Helper()
		timeout := time.After(10 * time.Second) // a bound for a failure, not a wait for the event
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("run's log ended with no line of %q", want)
				}
				if strings.Contains(l, want) {
					return l
				}
			case <-timeout:
				t.Fatalf("no line of %q in run's log", want)
			}
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	c := &connFlags{output: "text", holder: "h1"}
	var runErr error
	done := make(chan struct{})
	stop := func() { // the command stopped (SIGTERM to run), run returned
		cancel()
		go func() {
			for range lines {
			}
		}()
		<-done
	}
	t.Cleanup(stop) // after a failure too
	go func() {
		defer close(done)
		runErr = superviseUnderLease(ctx, c, "jobs.run", 300*time.Millisecond, false, []string{"sleep", "60"}, io.Discard, logW,
			func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
				l, err := kvlease.Acquire(ctx, g, "jobs.run", c.holder, 3*time.Second)
				if err != nil {
					return nil, err
				}
				return kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
			})
		logW.Close()
	}()
	next("command started")
	g.SetMode(kvleasetest.FakeFailFast) // no server answers
	next("renewal failed; trying again")
	g.SetMode(kvleasetest.FakeOK) // back
	if l := next("msg=renewed"); !strings.Contains(l, "after_failures=") || !strings.Contains(l, "level=INFO") {
		t.Errorf("the renewal after failures logged %q, want it at INFO with after_failures", l)
	}
	stop()
	if runErr == nil {
		t.Errorf("run = nil, want the stopped command's status")
	}
}

// A stop (SIGINT, SIGTERM, SIGHUP) that comes as the lease is taken ends
// run before its command starts, and the lease is released. run checked
// for a stop only when taking the lease failed: one that came as the grant
// was answered, or while run subscribed to the lease's change events,
// started the command all the same, and then sent it SIGTERM (found
// reading run with the signals in mind).
func TestRunStoppedAsTheLeaseIsTakenStartsNothing(t *testing.T) {
	g := kvleasetest.NewFakeGrantor()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	c := &connFlags{output: "text", holder: "h1", timeout: 5 * time.Second}
	// A file: the guard and the command write it themselves, not through
	// a goroutine of ours.
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	err = superviseUnderLease(ctx, c, "jobs.run", 300*time.Millisecond, false, []string{"true"}, io.Discard, stderr,
		func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
			l, err := kvlease.Acquire(ctx, g, "jobs.run", c.holder, 3*time.Second)
			if err != nil {
				return nil, err
			}
			k, err := kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
			cancel() // the stop, as the lease is taken
			return k, err
		})
	if err == nil || !strings.Contains(err.Error(), "the command did not run") {
		t.Errorf("run = %v, want the command not run", err)
	}
	if log, err := os.ReadFile(stderr.Name()); err != nil {
		t.Fatal(err)
	} else if strings.Contains(string(log), "command started") {
		t.Errorf("the command was started after the stop:\n%s", log)
	}
	if n := len(g.Releases()); n != 1 {
		t.Errorf("%d releases, want the lease released", n)
	}
}

// A command that cannot be started exits 127 if it was not found and 126
// if it was found but could not be run, as env(1) and the shells give
// them: run said 127 of both.
func TestRunCommandThatCannotStart(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\necho ran\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		argv []string
		want exitStatus
	}{
		{"missing", []string{filepath.Join(t.TempDir(), "missing")}, 127},
		{"not on PATH", []string{"leased-no-such-command"}, 127},
		{"not executable", []string{notExecutable}, 126},
		{"a directory", []string{t.TempDir()}, 126},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := kvleasetest.NewFakeGrantor()
			c := &connFlags{output: "text", holder: "h1", timeout: 5 * time.Second}
			err := superviseUnderLease(t.Context(), c, "jobs.run", 300*time.Millisecond, false, tc.argv, io.Discard, io.Discard,
				func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
					l, err := kvlease.Acquire(ctx, g, "jobs.run", c.holder, 3*time.Second)
					if err != nil {
						return nil, err
					}
					return kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
				})
			var status exitStatus
			if !errors.As(err, &status) || status != tc.want {
				t.Errorf("run %v = %v, want exit %d", tc.argv, err, tc.want)
			}
			if n := len(g.Releases()); n != 1 {
				t.Errorf("%d releases, want the lease released", n)
			}
		})
	}
}
