package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestBenchPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted: summarize sorts
	}
	for _, c := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", ms(7), Latency{P50: 7, P99: 7, P999: 7, Max: 7}},
		{"two", ms(2, 1), Latency{P50: 1, P99: 2, P999: 2, Max: 2}},
		{"hundred", ms(hundred...), Latency{P50: 50, P99: 99, P999: 100, Max: 100}},
		{"sub-millisecond", []time.Duration{1500 * time.Microsecond, 250 * time.Microsecond}, Latency{P50: 0.25, P99: 1.5, P999: 1.5, Max: 1.5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := summarize(c.in); got != c.want {
				t.Fatalf("summarize = %+v, want %+v", got, c.want)
			}
		})
	}
	// Nothing timed prints as such, not as latencies of zero.
	if got := summarize(nil).String(); strings.Contains(got, "0.000ms") {
		t.Errorf("no latencies print %q", got)
	}
}

func TestBenchErrorKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&kvlease.HeldError{Name: "a"}, "held"},
		{&kvlease.StaleRevisionError{Name: "a", Revision: 3}, "stale_revision"},
		{fmt.Errorf("x: %w", kvlease.ErrNotHolder), "not_holder"},
		{&kvlease.LeaseExpiredError{Name: "a"}, "expired"},
		{fmt.Errorf("%w: gone", kvlease.ErrNotFound), "not_found"},
		{fmt.Errorf("%w: holder has 1000", api.ErrLimitExceeded), "limit_exceeded"},
		{fmt.Errorf("%w: renew: %w", kvlease.ErrUnavailable, context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("%w: renew: %w", kvlease.ErrUnavailable, nats.ErrTimeout), "timeout"},
		{fmt.Errorf("%w: renew: %w", kvlease.ErrUnavailable, nats.ErrNoResponders), "no_responders"},
		{fmt.Errorf("%w: not connected", kvlease.ErrUnavailable), "unavailable"},
		{fmt.Errorf("%w: 5s not in [10s, 1m]", kvlease.ErrDurationOutOfRange), "ttl_out_of_range"},
		{fmt.Errorf("%w: empty", kvlease.ErrInvalidHolder), "invalid_argument"},
		{fmt.Errorf("%w: revoke", ErrPermissionDenied), "permission_denied"},
		// The service's refusals by their code: a lapsed lease's release
		// is "expired", which the client reports as ErrNotFound.
		{&api.ServiceError{Code: api.CodeExpired, Message: "lapsed"}, "expired"},
		{fmt.Errorf("release: %w", &api.ServiceError{Code: api.CodeNotFound}), "not_found"},
		{errors.New("boom"), "other"},
	} {
		if got := errorKind(c.err); got != c.want {
			t.Errorf("errorKind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestBenchProcFiles(t *testing.T) {
	// The command name may hold spaces and parentheses.
	stat := "4242 (leased (x) y) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 9 0 100 1000 2000 18446744073709551615"
	if got, err := parseProcStat(stat); err != nil || got != 3250*time.Millisecond {
		t.Fatalf("parseProcStat = %v, %v; want 3.25s (325 ticks)", got, err)
	}
	for _, bad := range []string{"", "4242 leased S 1", "4242 (leased) S 1 2 3"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
	status := "Name:\tleased\nVmPeak:\t 900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	rss, hwm, err := parseProcStatus(strings.NewReader(status))
	if err != nil || rss != 40<<20 || hwm != 50<<20 {
		t.Fatalf("parseProcStatus = %d, %d, %v; want 40 MiB, 50 MiB", rss, hwm, err)
	}
	if _, _, err := parseProcStatus(strings.NewReader("VmRSS:\tlots\n")); err == nil {
		t.Error("parseProcStatus of a bad line: no error")
	}
	// A zombie's status has no memory lines: it has exited.
	if _, _, err := parseProcStatus(strings.NewReader("Name:\tleased\nState:\tZ (zombie)\nThreads:\t1\n")); err == nil {
		t.Error("parseProcStatus of an exited process: no error")
	}
	// This process's own files parse.
	if _, err := readProcCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if rss, hwm, err := readProcMemory(os.Getpid()); err != nil || rss <= 0 || hwm < rss {
		t.Fatalf("readProcMemory of this process: %d, %d, %v", rss, hwm, err)
	}
}

// The scheduler hands leases out in due order, the earliest first even when
// it was pushed after a later one the dispatcher was waiting for.
func TestBenchScheduler(t *testing.T) {
	s := newScheduler()
	jobs := make(chan *liveLease)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx, jobs) }()
	defer func() { cancel(); <-done }()
	now := time.Now()
	late := &liveLease{due: now.Add(time.Hour)}
	s.push(late)
	var want []*liveLease
	for _, d := range []time.Duration{30, 10, 20} { // ms from now
		x := &liveLease{due: now.Add(d * time.Millisecond)}
		s.push(x)
		want = append(want, x)
	}
	want[0], want[1], want[2] = want[1], want[2], want[0]
	for i, w := range want {
		select {
		case got := <-jobs:
			if got != w {
				t.Fatalf("job %d due %v, want the one due %v", i, got.due.Sub(now), w.due.Sub(now))
			}
			if time.Now().Before(w.due) {
				t.Fatalf("job %d handed out %v before it was due", i, w.due.Sub(time.Now()))
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("job %d never came", i)
		}
	}
	if n := s.overdue(now.Add(2 * time.Hour)); n != 1 {
		t.Fatalf("overdue = %d, want the hour-late one", n)
	}
}

func TestBenchMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := slices.Clone(c.in)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median reordered its input: %v", c.in)
		}
	}
}

func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, f benchFlags)
	}{
		{name: "defaults", check: func(t *testing.T, f benchFlags) {
			if f.op != "grant" || f.clients != 16 || f.duration != 10*time.Second || f.ops != 0 || f.ttl != 5*time.Second {
				t.Errorf("%+v", f)
			}
		}},
		{name: "ops replaces duration", args: []string{"--ops", "10"}, check: func(t *testing.T, f benchFlags) {
			if f.duration != 0 || f.ops != 10 {
				t.Errorf("%+v", f)
			}
		}},
		{name: "release outlives its grant phase", args: []string{"--op", "release", "--duration", "60s"}, check: func(t *testing.T, f benchFlags) {
			if f.ttl != 130*time.Second {
				t.Errorf("ttl %v, want 2×60s+10s", f.ttl)
			}
		}},
		{name: "release with ops", args: []string{"--op", "release", "--ops", "5"}, check: func(t *testing.T, f benchFlags) {
			if f.ttl != time.Minute {
				t.Errorf("ttl %v, want 1m", f.ttl)
			}
		}},
		{name: "release ttl given", args: []string{"--op", "release", "--ttl", "3s"}, check: func(t *testing.T, f benchFlags) {
			if f.ttl != 3*time.Second {
				t.Errorf("ttl %v, want what was given", f.ttl)
			}
		}},
		{name: "live keeps three periods by default", args: []string{"--live", "5", "--ttl", "30s"}, check: func(t *testing.T, f benchFlags) {
			if f.keepFor != 30*time.Second || f.ttl != 30*time.Second {
				t.Errorf("for %v ttl %v, want 3 × 10s and 30s", f.keepFor, f.ttl)
			}
		}},
		{name: "live release ttl is the default", args: []string{"--live", "5"}, check: func(t *testing.T, f benchFlags) {
			if f.ttl != benchDefaultTTL {
				t.Errorf("ttl %v", f.ttl)
			}
		}},
		{name: "raw", args: []string{"--direct", "--raw"}, check: func(t *testing.T, f benchFlags) {
			if !f.raw || !f.direct {
				t.Errorf("flags %+v: want raw and direct", f)
			}
		}},
		{name: "unbatched", args: []string{"--direct", "--batching=false"}, check: func(t *testing.T, f benchFlags) {
			if f.batching {
				t.Error("batching still on")
			}
		}},
		{name: "raw without direct", args: []string{"--raw"}, wantErr: "give --direct too"},
		{name: "raw with batching", args: []string{"--direct", "--raw", "--batching=false"}, wantErr: "--raw sends every write on its own"},
		{name: "batching through the service", args: []string{"--batching=false"}, wantErr: "--batching goes with --direct"},
		{name: "compare", args: []string{"--direct", "--compare", "3"}, check: func(t *testing.T, f benchFlags) {
			if f.compare != 3 {
				t.Errorf("compare %d, want 3 rounds", f.compare)
			}
		}},
		{name: "compare the service", args: []string{"--compare", "3"}, check: func(t *testing.T, f benchFlags) {
			if f.compare != 3 || f.direct {
				t.Errorf("flags %+v: want 3 rounds through the service", f)
			}
		}},
		{name: "compare zero", args: []string{"--direct", "--compare", "0"}, wantErr: "--compare 0"},
		{name: "compare with raw", args: []string{"--direct", "--raw", "--compare", "2"}, wantErr: "runs --raw, --batching=false and --batching=true itself"},
		{name: "compare with live", args: []string{"--direct", "--compare", "2", "--live", "5"}, wantErr: "--compare does not go with --live"},
		{name: "clients", args: []string{"--clients", "0"}, wantErr: "--clients 0"},
		// A caller is a goroutine with its own figures: 100,000,000 of them
		// took 13 GB and ten minutes, deaf to SIGTERM, before the first
		// request (found by an outside client).
		{name: "clients past the bound", args: []string{"--clients", "100000000"}, wantErr: "--clients 100000000: want at most 10000"},
		{name: "clients at the bound", args: []string{"--clients", "10000"}, check: func(t *testing.T, f benchFlags) {
			if f.clients != 10000 {
				t.Errorf("clients %d", f.clients)
			}
		}},
		{name: "live zero", args: []string{"--live", "0"}, wantErr: "--live 0"},
		{name: "live with ops", args: []string{"--live", "5", "--ops", "5"}, wantErr: "--ops does not go with --live"},
		{name: "data without live", args: []string{"--data", "/x"}, wantErr: "--data goes with --live"},
		{name: "negative serve pid", args: []string{"--live", "5", "--serve-pid", "-3"}, wantErr: "--serve-pid -3"},
		{name: "negative duration", args: []string{"--duration", "-1s"}, wantErr: "--duration -1s"},
		{name: "release ttl too long for its phases", args: []string{"--op", "release", "--duration", "1h"}, check: func(t *testing.T, f benchFlags) {
			if f.ttl != time.Hour {
				t.Errorf("ttl %v, want capped at 1h", f.ttl)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := defaultBenchFlags()
			fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
			f.register(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := f.check(fs.Changed)
			switch {
			case c.wantErr != "":
				var ue usageError
				if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("check: %v; want a usage error with %q", err, c.wantErr)
				}
			case err != nil:
				t.Fatalf("check: %v", err)
			default:
				c.check(t, f)
			}
		})
	}
}

// recordingGrantor records the names it granted and calls onRelease
// before each release.
type recordingGrantor struct {
	*kvleasetest.FakeGrantor
	mu        sync.Mutex
	names     []string
	onRelease func()
}

func (g *recordingGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	rec, err := g.FakeGrantor.Grant(ctx, req)
	if err == nil {
		g.mu.Lock()
		g.names = append(g.names, req.Name)
		g.mu.Unlock()
	}
	return rec, err
}

func (g *recordingGrantor) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	if g.onRelease != nil {
		g.onRelease()
	}
	return g.FakeGrantor.Release(ctx, req)
}

// held is how many of the leases it granted are still held.
func (g *recordingGrantor) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, name := range g.names {
		if _, ok := g.Lookup(name); ok {
			n++
		}
	}
	return n
}

// The bench gives back what its setup granted and its timed phase did not
// release: the rest of --op release's pool when interrupted there (150 of
// 452 were left held for --ttl), and --op renew's leases at the end of
// every run (found in review).
func TestBenchGivesBackWhatItDidNotRelease(t *testing.T) {
	for _, c := range []struct {
		op        string
		interrupt int // the parent ctx is cancelled at this release (0: never)
	}{
		{op: benchRenew},
		{op: benchRelease, interrupt: 5},
		{op: benchRelease},
	} {
		t.Run(fmt.Sprintf("%s, interrupt at release %d", c.op, c.interrupt), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			g := &recordingGrantor{FakeGrantor: kvleasetest.NewFakeGrantor()}
			var releases atomic.Int32
			g.onRelease = func() {
				if releases.Add(1) == int32(c.interrupt) {
					cancel()
				}
			}
			f := defaultBenchFlags()
			f.op, f.clients, f.ops, f.duration, f.ttl = c.op, 2, 20, 0, time.Minute
			b := &bench{f: &f, g: g, via: "direct", run: "r", holder: "h", timeout: 5 * time.Second}
			r, err := b.runOps(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r.StoppedEarly != (c.interrupt > 0) {
				t.Errorf("stopped early: %t; want %t", r.StoppedEarly, c.interrupt > 0)
			}
			if n := g.held(); n != 0 {
				t.Errorf("%d of the %d leases the bench granted are left held for --ttl; want none", n, len(g.names))
			}
		})
	}
}

// --op renew grants a caller's next tenure, after a refused renewal, for
// the operation that renews it: it granted one right after the refusal,
// also after the run's last operation, which (against a stopped server)
// kept the run going a second --timeout past --duration, and granted a
// lease only to give it back (found by an outside client).
func TestBenchRenewGrantsNoTenureItDoesNotRenew(t *testing.T) {
	g := kvleasetest.NewFakeGrantor()
	g.SetMode(kvleasetest.FakeRefuse) // grants go through, renewals are refused
	f := defaultBenchFlags()
	f.op, f.clients, f.ops, f.duration, f.ttl = benchRenew, 1, 3, 0, time.Minute
	b := &bench{f: &f, g: g, via: "direct", run: "r", holder: "h", timeout: 5 * time.Second}
	r, err := b.runOps(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 3 || r.ErrorKind["not_holder"] != 3 {
		t.Errorf("errors %v; want the 3 renewals refused", r.ErrorKind)
	}
	if grants, renewals := g.Grants(), len(g.Renewals()); grants != renewals {
		t.Errorf("%d tenures granted for %d renewals; want one for each", grants, renewals)
	}
}

// A run whose connection was cancelled by a refusal (the NATS server
// denying a publish to the bucket) says so, not "stopped early
// (interrupted)" with the figures of a setup that granted nothing: no one
// interrupted it (found by an outside client, --direct --raw --op renew
// as a user without write access to the bucket).
func TestBenchRefusedIsNotInterrupted(t *testing.T) {
	parent, cancel := context.WithCancelCause(t.Context())
	cancel(&PermissionError{Op: "publish", Subject: "$KV.leases.bench.r.renew.0"})
	g := kvleasetest.NewFakeGrantor()
	g.SetMode(kvleasetest.FakeUnreachable) // the denied publish is never answered
	f := defaultBenchFlags()
	f.op, f.clients, f.ops, f.duration = benchRenew, 2, 10, 0
	b := &bench{f: &f, g: g, via: "raw", run: "r", holder: "h", timeout: 100 * time.Millisecond}
	r, err := b.runOps(parent)
	if !errors.Is(err, ErrPermissionDenied) || r.StoppedEarly {
		t.Fatalf("runOps: %+v, %v; want the refusal, not stopped early", r, err)
	}
}
