package cli

import (
	"bufio"
	"context"
	"io"
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
