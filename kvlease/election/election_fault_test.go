package election_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The test binary doubles as the child processes of the fault tests and
// the election benchmark.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{"candidate": candidate, "elect-writer": electWriter})
}

// candidate campaigns in the election named by KVLEASE_ELECTION for
// KVLEASE_D, says "leading <token>", and leads until it is killed.
func candidate(url string) error {
	ctx := context.Background()
	_, st, err := kvleasetest.ChildStore(ctx, url)
	if err != nil {
		return err
	}
	e, err := election.New(st, os.Getenv("KVLEASE_ELECTION"))
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(os.Getenv("KVLEASE_D"))
	if err != nil {
		return err
	}
	l, err := e.Campaign(ctx, "child", d)
	if err != nil {
		return err
	}
	fmt.Printf("leading %d\n", l.Token())
	<-l.Done()
	return l.Err()
}

// sysMono reads CLOCK_MONOTONIC, which all processes on the machine share
// (Go's monotonic readings are relative to each process's start).
func sysMono() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return time.Duration(ts.Nano())
}

// toSys maps a Go time with a monotonic reading to CLOCK_MONOTONIC.
func toSys(t time.Time) time.Duration { return sysMono() + time.Until(t) }

// electWriter runs the candidates named in KVLEASE_CANDIDATES in election
// "leader.multi". A leader works in steps: check its lease, work 50 ms (a
// pause can land here, as in real programs), write to the fenced resource.
// It prints, for the parent:
//
//	lead <name> <token> <start> <deadline>   (CLOCK_MONOTONIC ns)
//	deadline <token> <deadline>              after each renewal
//	write <name> <token> ok|refused <late>   late: the deadline had passed
func electWriter(url string) error {
	ctx := context.Background()
	js, st, err := kvleasetest.ChildStore(ctx, url)
	if err != nil {
		return err
	}
	fc, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		return err
	}
	e, err := election.New(st, "leader.multi")
	if err != nil {
		return err
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var wg sync.WaitGroup
	for _, name := range strings.Split(os.Getenv("KVLEASE_CANDIDATES"), ",") {
		wg.Go(func() {
			for {
				var token kvlease.Token
				lead, err := e.Campaign(ctx, name, time.Second,
					kvlease.WithKeeper(kvlease.WithOnRenew(func(rec kvlease.Record, deadline time.Time) {
						say("deadline %d %d", rec.Token, toSys(deadline))
					})))
				if err != nil {
					say("error %v", err)
					return
				}
				token = lead.Token()
				say("lead %s %d %d %d", name, token, sysMono(), toSys(lead.Lease().Deadline()))
				for lead.Lease().Check() == nil {
					time.Sleep(50 * time.Millisecond) // the work
					err := fc.Write(ctx, "resource", token, []byte(name))
					late := lead.Lease().Check() != nil
					switch {
					case err == nil:
						say("write %s %d ok %v", name, token, late)
					case errors.Is(err, fence.ErrStaleToken):
						say("write %s %d refused %v", name, token, late)
					default:
						say("error %v", err)
					}
				}
				lead.Orphan()
			}
		})
	}
	wg.Wait()
	return nil
}

type window struct {
	holder     string
	start, end time.Duration
}

// Five candidates in three processes; leaders are killed (SIGKILL) and
// paused (SIGSTOP) in turn. The holder-side validity windows of any two
// leaders never overlap on the machine's monotonic clock, and every write a
// paused leader attempts after resuming, once a newer leader has written,
// is refused by the fence. LEASED_LONG=1 runs 30 rounds instead of 6.
func TestElectionLeadersNeverOverlap(t *testing.T) {
	srv, _ := kvleasetest.NewStore(t) // default grantor margin: 1 s
	groups := []string{"a1,a2", "b1,b2", "c1"}
	type proc struct {
		cmd   *exec.Cmd
		group int
	}
	lines := make(chan string, 1024)
	procs := make([]*proc, len(groups))
	spawn := func(g int) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "KVLEASE_CHILD=elect-writer", "KVLEASE_URL="+srv.ClientURL(),
			"KVLEASE_CANDIDATES="+groups[g])
		out, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		procs[g] = &proc{cmd, g}
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
	}
	for g := range groups {
		spawn(g)
	}
	groupOf := func(name string) int {
		return slices.IndexFunc(groups, func(g string) bool { return slices.Contains(strings.Split(g, ","), name) })
	}

	windows := map[kvlease.Token]*window{}
	var leader string
	var leaderToken kvlease.Token
	var lateRefused, lateAccepted int
	paused := -1
	var pausedToken kvlease.Token
	rounds := 6
	if longTests() {
		rounds = 30
	}
	next := func(timeout time.Duration) string {
		select {
		case l := <-lines:
			return l
		case <-time.After(timeout):
			t.Fatalf("no output for %v (round leader %s)", timeout, leader)
			return ""
		}
	}
	var tok kvlease.Token
	var a, b int64
	var name, res string
	var late bool
	var resumedAt time.Time
	var quiet int // resumed leaders whose pause fell outside a check→write gap
	testDeadline := time.Now().Add(2 * time.Minute)
	for round := 0; round < rounds; {
		if time.Now().After(testDeadline) {
			t.Fatalf("only %d of %d rounds in 2 minutes", round, rounds)
		}
		// A resumed leader whose pause did not fall between a check and
		// its write finds its lease gone at the next check and writes
		// nothing: after 3 s, move on.
		if paused >= 0 && !resumedAt.IsZero() && time.Since(resumedAt) > 3*time.Second {
			paused, resumedAt = -1, time.Time{}
			quiet++
			round++
		}
		l := next(15 * time.Second)
		switch {
		case strings.HasPrefix(l, "lead "):
			fmt.Sscanf(l, "lead %s %d %d %d", &name, &tok, &a, &b)
			windows[tok] = &window{holder: name, start: time.Duration(a), end: time.Duration(b)}
			leader, leaderToken = name, tok
		case strings.HasPrefix(l, "deadline "):
			fmt.Sscanf(l, "deadline %d %d", &tok, &b)
			if w := windows[tok]; w != nil && time.Duration(b) > w.end {
				w.end = time.Duration(b)
			}
		case strings.HasPrefix(l, "write "):
			fmt.Sscanf(l, "write %s %d %s %t", &name, &tok, &res, &late)
			if paused >= 0 && groupOf(name) == paused && tok == pausedToken {
				// The resumed leader's write: a newer leader has written.
				if res == "refused" {
					lateRefused++
				} else {
					lateAccepted++
					t.Errorf("write by %s with token %d accepted after a newer leader wrote", name, tok)
				}
				paused, resumedAt = -1, time.Time{}
				round++
				continue
			}
			if res != "ok" || tok != leaderToken {
				continue
			}
			if paused >= 0 { // a newer leader has written: wake the paused one
				if resumedAt.IsZero() {
					_ = procs[paused].cmd.Process.Signal(syscall.SIGCONT)
					resumedAt = time.Now()
				}
				continue
			}
			// The current leader has written: strike its process.
			g := groupOf(name)
			if round%2 == 0 {
				_ = procs[g].cmd.Process.Signal(syscall.SIGKILL)
				_ = procs[g].cmd.Wait()
				spawn(g)
				round++
			} else {
				_ = procs[g].cmd.Process.Signal(syscall.SIGSTOP)
				paused, pausedToken = g, tok
			}
		case strings.HasPrefix(l, "error "):
			t.Fatal(l)
		}
	}
	// No two leaders' windows overlap: each ends before the next begins.
	tokens := slices.Sorted(func(yield func(kvlease.Token) bool) {
		for tk := range windows {
			if !yield(tk) {
				return
			}
		}
	})
	var gaps []time.Duration
	for i := 1; i < len(tokens); i++ {
		prev, cur := windows[tokens[i-1]], windows[tokens[i]]
		if prev.end > cur.start {
			t.Fatalf("leader %s (token %d) valid until %v, after %s (token %d) began at %v",
				prev.holder, tokens[i-1], prev.end, cur.holder, tokens[i], cur.start)
		}
		gaps = append(gaps, cur.start-prev.end)
	}
	if lateRefused == 0 {
		t.Fatal("no paused leader attempted a write after resuming")
	}
	t.Logf("%d leaders, no overlap (gaps between windows: min %v, max %v); %d late writes refused, %d accepted, %d resumed leaders wrote nothing",
		len(tokens), slices.Min(gaps).Round(time.Millisecond), slices.Max(gaps).Round(time.Millisecond), lateRefused, lateAccepted, quiet)
}

func longTests() bool { return os.Getenv("LEASED_LONG") == "1" }
