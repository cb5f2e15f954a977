package cli

import (
	"bufio"
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// Defaults of leased bench.
const (
	benchDefaultClients  = 16
	benchDefaultDuration = 10 * time.Second
	// benchDefaultTTL is small, so that what a run leaves behind lapses
	// soon, and long enough that the holder's margin (D/10) leaves room.
	benchDefaultTTL = 5 * time.Second
	// benchHolderBatch leases share one holder name: far under the
	// service's per-holder limit (default 1000), without making a holder
	// (an entry in the service's per-holder count) per lease.
	benchHolderBatch = 100
	// benchMaxClients bounds --clients: far past where one connection's
	// callers still measure the deployment rather than the bench.
	benchMaxClients = 10000
	// benchProgressEvery is how often --live prints progress to stderr.
	benchProgressEvery = 10 * time.Second
	// userHZ is the unit of the CPU times in /proc/PID/stat (USER_HZ,
	// 100 on every Linux architecture's user-space ABI).
	userHZ = 100
)

// The benchmark's operations (--op).
const (
	benchGrant        = "grant"
	benchRenew        = "renew"
	benchRelease      = "release"
	benchGrantRelease = "grant-release"
)

var benchOps = []string{benchGrant, benchRenew, benchRelease, benchGrantRelease}

// benchFlags are leased bench's own flags.
type benchFlags struct {
	op       string
	clients  int
	duration time.Duration
	ops      int
	ttl      time.Duration
	direct   bool
	batching bool // with --direct
	raw      bool
	compare  int // rounds of raw, unbatched and batched, with --direct
	bucket   string
	prefix   string

	live     int
	keepFor  time.Duration
	servePID int
	data     string
	release  bool
}

// check validates the flags (changed reports whether a flag was given) and
// fills the defaults that depend on others. Every error is a usage error:
// nothing has been sent.
func (f *benchFlags) check(changed func(string) bool) error {
	bad := func(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }
	if f.clients < 1 {
		return bad("--clients %d: want at least 1", f.clients)
	}
	if f.clients > benchMaxClients {
		// Each caller is a goroutine with figures of its own: 100,000,000
		// took 13 GB and ten minutes, deaf to SIGTERM, before the first
		// request (found by an outside client).
		return bad("--clients %d: want at most %d (callers on one connection)", f.clients, benchMaxClients)
	}
	if err := kvlease.ValidateName(f.prefix); err != nil {
		return bad("--prefix: %w", err)
	}
	if err := grantorsOwn("--prefix", f.prefix); err != nil {
		return err
	}
	switch {
	case f.raw && !f.direct:
		return bad("--raw writes the bucket directly: give --direct too")
	case f.raw && changed("batching"):
		return bad("--batching is the lease store's: --raw sends every write on its own")
	case changed("batching") && !f.direct:
		return bad("--batching goes with --direct (the service batches as its serve was told)")
	case changed("compare") && f.compare < 1:
		return bad("--compare %d: want at least 1 round", f.compare)
	case changed("compare") && (f.raw || changed("batching")):
		return bad("--compare runs --raw, --batching=false and --batching=true itself")
	case changed("compare") && changed("live"):
		return bad("--compare does not go with --live")
	case changed("bucket") && !f.direct && !changed("compare"):
		return bad("--bucket goes with --direct or --compare (through the service, the bucket is its serve's)")
	}
	if err := kvlease.ValidateBucket(f.bucket); err != nil {
		// --compare said "grantor unavailable: invalid bucket name", exit 1.
		return bad("--bucket: %w", err)
	}
	if !changed("ttl") && f.op == benchRelease && !changed("live") {
		// The pool is granted first, then released: it must outlive both.
		f.ttl = time.Minute
		if f.duration > 0 {
			f.ttl = max(f.ttl, 2*f.duration+10*time.Second)
		}
		f.ttl = min(f.ttl, kvlease.DefaultMaxDuration)
	}
	if f.ttl < kvlease.MinDuration || f.ttl > kvlease.DefaultMaxDuration {
		return bad("--ttl %v: want %v to %v", f.ttl, kvlease.MinDuration, kvlease.DefaultMaxDuration)
	}
	if err := kvlease.ValidateWindow(f.ttl, kvlease.DefaultHolderMargin(f.ttl), kvlease.DefaultClockRate); err != nil {
		return bad("--ttl %v: %w", f.ttl, err)
	}
	if changed("live") {
		if f.live < 1 {
			return bad("--live %d: want at least 1 lease", f.live)
		}
		for _, name := range []string{"op", "ops", "duration"} {
			if changed(name) {
				return bad("--%s does not go with --live (which grants --live leases and renews them for --for)", name)
			}
		}
		if !changed("for") {
			f.keepFor = 3 * kvlease.DefaultRenewInterval(f.ttl) // three renewal periods
		}
		if f.keepFor <= 0 {
			return bad("--for %v: want a positive duration", f.keepFor)
		}
		if changed("serve-pid") && changed("data") {
			return bad("--serve-pid and --data both name the serve process: give one")
		}
		if changed("serve-pid") && f.servePID < 1 {
			return bad("--serve-pid %d: want a process id", f.servePID)
		}
		return nil
	}
	for _, name := range []string{"for", "serve-pid", "data", "release"} {
		if changed(name) {
			return bad("--%s goes with --live only", name)
		}
	}
	if !slices.Contains(benchOps, f.op) {
		return bad("--op %q: want one of %s", f.op, strings.Join(benchOps, ", "))
	}
	switch {
	case changed("duration") && changed("ops"):
		return bad("--duration and --ops do not go together: give one")
	case changed("ops") && f.ops < 1:
		return bad("--ops %d: want at least 1", f.ops)
	case changed("duration") && f.duration <= 0:
		return bad("--duration %v: want a positive duration", f.duration)
	case !changed("ops"):
		f.ops = 0 // run for --duration
	default:
		f.duration = 0
	}
	return nil
}

func defaultBenchFlags() benchFlags {
	return benchFlags{op: benchGrant, clients: benchDefaultClients, duration: benchDefaultDuration, ttl: benchDefaultTTL,
		batching: true, bucket: kvlease.DefaultBucket, prefix: "bench"}
}

func (f *benchFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.op, "op", f.op, "what one timed operation is: "+strings.Join(benchOps, ", ")+" (see above)")
	fl.IntVar(&f.clients, "clients", f.clients, "concurrent callers, at most 10000 (with --live: workers renewing and granting)")
	fl.DurationVar(&f.duration, "duration", f.duration, "how long to run (not with --ops)")
	fl.IntVar(&f.ops, "ops", 0, "run this many operations instead of for --duration")
	fl.DurationVar(&f.ttl, "ttl", f.ttl, "lease duration D (--op release: default 1m, or 2×--duration+10s if longer, at most 1h)")
	fl.BoolVar(&f.direct, "direct", false, "write the lease bucket directly (kvlease.Store) instead of through the service")
	fl.BoolVar(&f.batching, "batching", f.batching, "with --direct: commit concurrent writes together (group commit); false sends each on its own")
	fl.BoolVar(&f.raw, "raw", false, "with --direct: the baseline, each operation the single-message KV write it comes down to (see above)")
	fl.IntVar(&f.compare, "compare", 0, "run --op this many rounds, each the raw baseline and the service (with --direct: the store without batching and with it) in turn, and print their medians and ratios to raw")
	fl.StringVar(&f.bucket, "bucket", f.bucket, "lease bucket name, with --direct or --compare")
	fl.StringVar(&f.prefix, "prefix", f.prefix, "first token(s) of the lease names")
	fl.IntVar(&f.live, "live", 0, "grant this many leases and keep them renewed every TTL/3 for --for")
	fl.DurationVar(&f.keepFor, "for", 0, "with --live: how long to keep the leases renewed after the last grant (default 3 renewal periods, = --ttl)")
	fl.IntVar(&f.servePID, "serve-pid", 0, "with --live: pid of the local leased serve, to report its CPU and RSS")
	fl.StringVar(&f.data, "data", "", "with --live: data directory of the local leased serve (its pid is in DIR/leased.lock), to report its CPU and RSS")
	fl.BoolVar(&f.release, "release", false, "with --live: release the leases at the end instead of leaving them to lapse")
}

func newBench(stdout, stderr io.Writer) *cobra.Command {
	var c connFlags
	f := defaultBenchFlags()
	cmd := &cobra.Command{
		Use:   "bench [--op OP] [--clients N] [--duration D | --ops N] | bench --live N [--ttl D] [--for T]",
		Short: "Load a deployment: ops/s and latency, or N live leases kept renewed",
		Long: `bench loads a lease deployment from --clients concurrent callers, through the
service API (lease.v1.*) by default, or with --direct on the lease bucket itself
(JetStream access to --bucket needed; the service is bypassed, not needed).
All callers share one NATS connection.

--op says what one timed operation is:
  grant          grant a new lease (a new name each time); the lease is left
                 to lapse by its TTL
  renew          renew the caller's lease (each caller holds one, granted
                 untimed before the clock starts)
  release        release a granted lease: the leases are granted first,
                 untimed (as many as --ops, or for --duration), then released
                 timed; their default --ttl outlives both phases, and one that
                 lapses before its release counts as an error: expired
                 through the service, not_found with --direct,
                 stale_revision with --raw (its expiry moved the revision)
  grant-release  grant a new lease and release it: one op is both requests
It runs for --duration (default 10s) or --ops operations, then prints ops/s,
the latency percentiles p50, p99, p999 and max of the timed operations, and
the errors by kind. Names are PREFIX.RUN.…, RUN a random id of this run;
holders are HOLDER-cC-bN (caller C), one per 100 leases, far under the
service's --max-leases-per-holder. Interrupted (SIGINT), it stops and
prints what it measured; the requests the interrupt cut off are not
counted (a grant-release pair in flight finishes, within --timeout), and
interrupted before any operation succeeded (in --op renew's or release's
untimed setup, say) it measured nothing and exits 1.
What a run granted and did not release (--op renew's leases, the pool of
an interrupted --op release, a release that failed) it releases as it
ends, interrupted or not, waiting at most 5 s for that: a run can end an
operation's --timeout and those 5 s after --duration, and what is still
held then lapses by --ttl, as --op grant's leases all do.

With --direct the lease store commits concurrent writes together (group
commit), as serve does; --batching=false sends each on its own. --direct --raw
is the baseline both are measured against: each operation is the one
single-message KV write it comes down to (a create with the TTL, a publish
expecting the last revision, a purge expecting it), with none of the store's
work around it. --compare N runs all three in turns, N rounds, and prints
each variant's medians and its ops/s as a ratio to raw's in the same round:
what group commit buys on that deployment. Without --direct, --compare runs
the service against the raw writes under it (which needs access to the
bucket too). Interrupted, it prints the rounds it completed (in the first
round, none: it says so and exits 1).

--live N grants N leases (PREFIX.RUN.live.I, with --clients callers) and keeps
every one renewed every TTL/3 (kvlease.Lease.Renew, which refuses to send
past the holder's deadline), until --for (default three renewal periods)
after the last grant; if the grants have not all succeeded by --for after
the start, the keep phase starts with those granted. One scheduler holds the
leases by due time and --clients workers renew them, renewals before grants:
a deployment that cannot renew more stops granting, and how many it granted
is how many it holds.
It reports renewals, failures, lapses of renewed leases (a lease whose
renewal did not succeed before its holder deadline, including one still
waiting for a worker at its deadline), refusals, the renewal latency, how
late renewals were sent after they were due, and, with --serve-pid P or
--data DIR (the pid in DIR/leased.lock, which serve writes), that local
process's CPU (share of one core over the keep phase) and RSS (VmRSS at
the end, and its peak VmHWM since the process started: a serve that held
more before the run shows that). It prints progress to stderr every 10s. At the end the
leases are left to lapse by their TTL, or released with --release.

Exit status 2 for bad flags (nothing is sent), 1 if the server cannot be
reached (with --op: at the start, or at the end, the connection lost during
the run) or no operation succeeded, interrupted or not (with --live: no lease was granted, none
was live at the end, or the serve process named exited during the run).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(cmd.Flags().Changed); err != nil {
				return err
			}
			var pid int
			if f.live > 0 {
				var err error
				if pid, err = f.serveProcess(); err != nil {
					return err
				}
			}
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				b := &bench{f: &f, timeout: c.timeout, holder: c.holder, url: redact.URL(c.url), via: "service",
					run: newRunID()}
				p := c.printer(stdout)
				if f.compare > 0 { // opens what it compares
					r, err := b.runCompare(ctx, &c, nc)
					if err != nil && len(r.Rounds) == 0 {
						return err
					}
					r.print(p) // what it measured, before a failure too
					return err
				}
				switch {
				case f.raw:
					g, err := c.openRaw(ctx, nc, f.bucket)
					if err != nil {
						return err
					}
					b.g, b.via = g, "raw"
				case f.direct:
					var opts []kvlease.Option
					b.via = "direct"
					if !f.batching {
						opts, b.via = append(opts, kvlease.WithoutBatching()), "direct-unbatched"
					}
					st, err := c.openStore(ctx, nc, f.bucket, opts...)
					if err != nil {
						return err
					}
					b.g = st
				default:
					cl, err := c.client(nc)
					if err != nil {
						return err
					}
					b.g = cl
				}
				if f.live > 0 {
					r, err := b.runLive(ctx, pid, stderr)
					if err != nil {
						return err
					}
					r.print(p)
					return r.failure()
				}
				r, err := b.runOps(ctx)
				if err != nil {
					return err
				}
				r.print(p)
				switch {
				case r.Ops == 0 && r.StoppedEarly:
					// It timed nothing: it exited 0 with ops=0, which a
					// script took for a run, while --compare interrupted in
					// its first round fails (found by an outside client).
					return fmt.Errorf("%w: interrupted before any %s succeeded: nothing measured", ErrBenchFailed, f.op)
				case r.Ops == 0:
					return fmt.Errorf("%w: no %s succeeded", ErrBenchFailed, f.op)
				}
				if st := nc.Status(); st != nats.CONNECTED && !r.StoppedEarly {
					// The server went away during the run and was not back
					// at its end: the figures include the time it was gone
					// (a killed serve's run ended exit 0, its only sign a
					// few timeouts; found by an outside client).
					return fmt.Errorf("%w: the connection to the NATS server was lost during the run and not back at its end (%v): "+
						"the figures include the time it was gone", ErrBenchFailed, st)
				}
				return nil
			})
		},
	}
	fl := cmd.Flags()
	c.register(fl)
	c.registerHolder(fl)
	f.register(fl)
	return cmd
}

// ErrBenchFailed: a benchmark ran but no operation succeeded.
var ErrBenchFailed = errors.New("bench failed")

// serveProcess returns the pid --serve-pid or --data names (0 if neither),
// after checking that the process exists and its /proc files can be read.
func (f *benchFlags) serveProcess() (int, error) {
	pid := f.servePID
	if f.data != "" {
		// The lock, not only the pid in its file: the file stays after
		// its serve has exited.
		var err error
		if pid, err = embedded.LockHolder(f.data); err != nil {
			return 0, usageError{fmt.Errorf("--data %s: %w (is a leased serve running on it?)", f.data, err)}
		}
	}
	if pid == 0 {
		return 0, nil
	}
	if _, err := readProcCPU(pid); err != nil {
		return 0, usageError{fmt.Errorf("serve process %d: %w", pid, err)}
	}
	if err := checkServeCommand(pid); err != nil {
		return 0, usageError{err}
	}
	return pid, nil
}

// checkServeCommand checks that process pid runs `leased serve`: a
// "serve" among its arguments.
func checkServeCommand(pid int) error {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return fmt.Errorf("serve process %d: %w", pid, err)
	}
	args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(args) < 2 || !slices.Contains(args[1:], "serve") {
		// Its program only: the rest of another process's command line
		// may hold its secrets (found by an outside client).
		return fmt.Errorf("process %d is not a leased serve (its program: %q)", pid, filepath.Base(args[0]))
	}
	return nil
}

// bench is one run against a grantor.
type bench struct {
	f       *benchFlags
	g       kvlease.Grantor
	via     string // "service" or "direct"
	url     string // redacted
	run     string // this run's id, in every lease name
	holder  string // holders are holder-bN
	timeout time.Duration
}

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func (b *bench) name(kind string, parts ...int) string {
	var sb strings.Builder
	sb.WriteString(b.f.prefix + "." + b.run + "." + kind)
	for _, p := range parts {
		sb.WriteString("." + strconv.Itoa(p))
	}
	return sb.String()
}

// holderOf returns the holder of the n-th lease of a caller: a new holder
// every benchHolderBatch leases.
func (b *bench) holderOf(caller, n int) string {
	return fmt.Sprintf("%s-c%d-b%d", b.holder, caller, n/benchHolderBatch)
}

// fatalBenchError reports whether err would repeat for every operation (a
// flag the server refuses, a permission it does not grant): the run stops.
func fatalBenchError(err error) bool {
	return exitCode(err) == ExitUsage || errors.Is(err, ErrPermissionDenied)
}

// errorKind names an error's kind, for the errors-by-kind counts: the
// service's code for its refusals (docs/api.md), the same names for the
// Store's.
func errorKind(err error) string {
	if se := (*api.ServiceError)(nil); errors.As(err, &se) && se.Code != "" {
		return se.Code // a lapsed lease's release is "expired", not "not_found"
	}
	switch {
	case errors.Is(err, kvlease.ErrDurationOutOfRange):
		return "ttl_out_of_range"
	case errors.Is(err, kvlease.ErrInvalidName), errors.Is(err, kvlease.ErrInvalidHolder),
		errors.Is(err, kvlease.ErrInvalidOption), errors.Is(err, kvlease.ErrInvalidTiming):
		return "invalid_argument"
	case errors.Is(err, ErrPermissionDenied):
		return "permission_denied"
	case errors.Is(err, kvlease.ErrHeld):
		return "held"
	case errors.Is(err, kvlease.ErrExpired):
		return "expired"
	case errors.Is(err, kvlease.ErrNotFound):
		return "not_found"
	case errors.Is(err, kvlease.ErrStaleRevision):
		return "stale_revision"
	case errors.Is(err, kvlease.ErrNotHolder):
		return "not_holder"
	case errors.Is(err, api.ErrLimitExceeded):
		return "limit_exceeded"
	case errors.Is(err, api.ErrTooLarge):
		return "too_large"
	case errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return "timeout"
	case errors.Is(err, kvlease.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, api.ErrInternal):
		return "internal"
	default:
		return "other"
	}
}

// benchStats are one caller's figures; merged at the end.
type benchStats struct {
	lat  []time.Duration // of the timed operations that succeeded
	ok   int             // untimed grants that succeeded (setup)
	errs map[string]int
}

// fail counts err. After an unavailable grantor the caller pauses
// (failPause) before its next operation, as a client's retry would: against
// a stopped server it spun, a million errors in 3 s (found by an outside
// client).
func (s *benchStats) fail(err error) {
	if s.errs == nil {
		s.errs = map[string]int{}
	}
	s.errs[errorKind(err)]++
	if errors.Is(err, kvlease.ErrUnavailable) {
		time.Sleep(failPause)
	}
}

// failPause is how long a bench caller waits after an unavailable grantor.
const failPause = 10 * time.Millisecond

func mergeStats(all []benchStats) (lat []time.Duration, errs map[string]int) {
	errs = map[string]int{}
	for _, s := range all {
		lat = append(lat, s.lat...)
		for k, n := range s.errs {
			errs[k] += n
		}
	}
	return lat, errs
}

// Latency is a summary of durations, in milliseconds.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// summarize returns the nearest-rank percentiles of ds (sorting it).
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{P50: ms(percentile(ds, 0.50)), P99: ms(percentile(ds, 0.99)),
		P999: ms(percentile(ds, 0.999)), Max: ms(ds[len(ds)-1])}
}

// percentile returns the nearest-rank q-quantile of sorted (not empty):
// the smallest value with at least q of the values at or below it.
func percentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func (l Latency) String() string {
	if l == (Latency{}) {
		return "none (no operation to time)"
	}
	return fmt.Sprintf("p50=%.3fms p99=%.3fms p999=%.3fms max=%.3fms", l.P50, l.P99, l.P999, l.Max)
}

func kinds(errs map[string]int) string {
	if len(errs) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(errs)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, errs[k]))
	}
	return strings.Join(parts, " ")
}

func total(errs map[string]int) int {
	n := 0
	for _, v := range errs {
		n += v
	}
	return n
}

// OpsResult is what a --op run prints.
type OpsResult struct {
	Op        string         `json:"op"`
	Via       string         `json:"via"`
	URL       string         `json:"url"`
	Clients   int            `json:"clients"`
	TTL       string         `json:"ttl"`
	Ops       int            `json:"ops"`
	Errors    int            `json:"errors"`
	ErrorKind map[string]int `json:"errors_by_kind"`
	Elapsed   float64        `json:"elapsed_s"`
	OpsPerSec float64        `json:"ops_per_sec"`
	Latency   Latency        `json:"latency"`
	// Setup is the untimed phase of --op renew and release.
	Setup *SetupResult `json:"setup,omitempty"`
	// StoppedEarly: interrupted before --duration or --ops.
	StoppedEarly bool `json:"stopped_early,omitempty"`
}

// SetupResult is an untimed phase: the leases granted before the clock starts.
type SetupResult struct {
	Granted   int            `json:"granted"`
	Errors    int            `json:"errors"`
	ErrorKind map[string]int `json:"errors_by_kind"`
	Elapsed   float64        `json:"elapsed_s"`
}

func (r OpsResult) print(p printer) {
	if p.json {
		p.obj(r)
		return
	}
	p.line("bench op=%s via=%s url=%s clients=%d ttl=%s", r.Op, r.Via, r.URL, r.Clients, r.TTL)
	if s := r.Setup; s != nil {
		p.line("setup granted=%d errors=%d elapsed=%.3fs (untimed) errors_by_kind: %s", s.Granted, s.Errors, s.Elapsed, kinds(s.ErrorKind))
	}
	p.line("ops=%d errors=%d elapsed=%.3fs ops_per_sec=%.1f", r.Ops, r.Errors, r.Elapsed, r.OpsPerSec)
	p.line("latency %s", r.Latency)
	p.line("errors_by_kind: %s", kinds(r.ErrorKind))
	if r.StoppedEarly {
		p.line("stopped early (interrupted)")
	}
}

// runOps runs the --op benchmark.
func (b *bench) runOps(parent context.Context) (OpsResult, error) {
	f := b.f
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, b.timeout) }
	// A grant of the setup is let finish (within --timeout) whatever ends
	// the run: one the interrupt cut off in flight was carried out
	// unanswered, and its lease, never in a pool, was left held for --ttl
	// (45 of 64 clients' after a SIGINT; found by an outside client).
	grantCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	}

	var setup *SetupResult
	// Each caller's leases granted before the clock starts.
	pools := make([][]kvlease.Record, f.clients)
	leases := make([]*kvlease.Lease, f.clients)
	switch f.op {
	case benchRenew:
		setup = b.setup(ctx, cancel, func(ctx context.Context, w int, _ func() bool, s *benchStats) {
			octx, ocancel := grantCtx()
			defer ocancel()
			l, err := kvlease.Acquire(octx, b.g, b.name("renew", w), b.holderOf(w, 0), f.ttl)
			if err != nil && ctx.Err() != nil {
				return // cut off by an interrupt, or by another caller's refusal: not the server's
			}
			if err != nil {
				s.fail(err)
				if fatalBenchError(err) {
					cancel(err)
				}
				return
			}
			leases[w] = l
			s.ok++
		})
	case benchRelease:
		setup = b.setup(ctx, cancel, func(ctx context.Context, w int, claim func() bool, s *benchStats) {
			for n := 0; claim(); n++ {
				octx, ocancel := grantCtx()
				rec, err := b.g.Grant(octx, kvlease.GrantRequest{Name: b.name("release", w, n), Holder: b.holderOf(w, n), Duration: f.ttl})
				ocancel()
				if err != nil && ctx.Err() != nil {
					return // cut off by an interrupt, or by another caller's refusal: not the server's
				}
				if err != nil {
					s.fail(err)
					if fatalBenchError(err) {
						cancel(err)
					}
					continue
				}
				pools[w] = append(pools[w], rec)
				s.ok++
			}
		})
	}
	// What the setup granted and the timed phase did not release is given
	// back however the run ends: an interrupted --op release left the rest
	// of its pool, and every --op renew its callers' leases, held for
	// --ttl (found in review).
	defer b.releaseUntimed(pools, leases)
	switch cause := context.Cause(ctx); {
	case cause != nil && !errors.Is(cause, context.Canceled):
		// A refusal every grant would meet (a --ttl out of the grantor's
		// range), or the connection's (a publish the server denies):
		// said, not counted as "no renew succeeded", nor as an interrupt
		// (found by outside clients).
		return OpsResult{}, fmt.Errorf("bench %s: %w", f.op, cause)
	case parent.Err() != nil || setup != nil && setup.Granted == 0:
		// Interrupted while granting, or nothing granted to time: what
		// was measured is printed, and no timed phase runs (it printed
		// nothing when interrupted, and timed nothing for --duration
		// when the setup granted nothing; found by an outside client).
		return OpsResult{Op: f.op, Via: b.via, URL: b.url, Clients: f.clients, TTL: f.ttl.String(), Setup: setup,
			StoppedEarly: parent.Err() != nil}, nil
	}

	stats := make([]benchStats, f.clients)
	var next atomic.Int64
	start := time.Now()
	runCtx, stop := ctx, context.CancelFunc(func() {})
	if f.duration > 0 && f.op != benchRelease {
		runCtx, stop = context.WithTimeout(ctx, f.duration)
	}
	defer stop()
	claim := func() bool {
		if runCtx.Err() != nil {
			return false
		}
		return f.ops == 0 || next.Add(1) <= int64(f.ops)
	}
	var wg sync.WaitGroup
	for w := range f.clients {
		wg.Go(func() {
			s := &stats[w]
			timed := func(op func(context.Context) error) {
				octx, ocancel := opCtx()
				t := time.Now()
				err := op(octx)
				d := time.Since(t)
				ocancel()
				if err != nil && ctx.Err() != nil {
					return // cut off by an interrupt: not the server's
				}
				if err != nil {
					s.fail(err)
					if fatalBenchError(err) {
						cancel(err)
					}
					return
				}
				s.lat = append(s.lat, d)
			}
			switch f.op {
			case benchGrant:
				for n := 0; claim(); n++ {
					timed(func(ctx context.Context) error {
						_, err := b.g.Grant(ctx, kvlease.GrantRequest{Name: b.name("grant", w, n), Holder: b.holderOf(w, n), Duration: f.ttl})
						return err
					})
				}
			case benchGrantRelease:
				for n := 0; claim(); n++ {
					timed(func(ctx context.Context) error {
						// An interrupt lets the pair finish (within --timeout):
						// a grant it cut off in flight was carried out
						// unanswered, and a release it cut off was never sent,
						// each lease left held for --ttl.
						ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
						defer cancel()
						rec, err := b.g.Grant(ctx, kvlease.GrantRequest{Name: b.name("gr", w, n), Holder: b.holderOf(w, n), Duration: f.ttl})
						if err != nil {
							return err
						}
						if err := b.g.Release(ctx, releaseOf(rec)); err != nil {
							pools[w] = append(pools[w], rec) // given back at the end
							return err
						}
						return nil
					})
				}
			case benchRenew:
				for n := 1; claim(); {
					if l := leases[w]; l == nil || l.Check() != nil {
						// Refused or lapsed (counted): a new tenure, untimed,
						// for this operation to renew. Granted as the last
						// one failed, it was also granted after the run's
						// last operation, a second --timeout past --duration
						// against a stopped server (found by an outside
						// client).
						octx, ocancel := opCtx()
						l, err := kvlease.Acquire(octx, b.g, b.name("renew", w, n), b.holderOf(w, n), f.ttl)
						ocancel()
						n++
						leases[w] = l
						if err != nil {
							s.fail(err)
							if fatalBenchError(err) {
								cancel(err)
							}
							continue
						}
					}
					timed(leases[w].Renew)
				}
			case benchRelease:
				// What is not released (cut off, or failed: a release that
				// timed out leaves its lease held; found in review) stays
				// in the pool, given back at the end.
				var kept []kvlease.Record
				i := 0
				for ; i < len(pools[w]) && ctx.Err() == nil; i++ {
					rec := pools[w][i]
					var err error
					timed(func(ctx context.Context) error {
						err = b.g.Release(ctx, releaseOf(rec))
						return err
					})
					if err != nil && !errors.Is(err, kvlease.ErrNotFound) {
						kept = append(kept, rec)
					}
				}
				pools[w] = append(kept, pools[w][i:]...)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return OpsResult{}, fmt.Errorf("bench %s: %w", f.op, err)
	}
	lat, errs := mergeStats(stats)
	return OpsResult{Op: f.op, Via: b.via, URL: b.url, Clients: f.clients, TTL: f.ttl.String(),
		Ops: len(lat), Errors: total(errs), ErrorKind: errs, Elapsed: round3(elapsed.Seconds()),
		OpsPerSec: math.Round(float64(len(lat))/elapsed.Seconds()*10) / 10, Latency: summarize(lat), Setup: setup,
		StoppedEarly: ctx.Err() != nil}, nil
}

// releaseUntimed gives back, within releaseUntimedFor, what the setup
// granted and the timed phase did not release (interrupted, or --op
// renew's leases): it was left held for --ttl, 1,600 leases of --op
// release interrupted after 1.5 s (found by an outside client).
func (b *bench) releaseUntimed(pools [][]kvlease.Record, leases []*kvlease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseUntimedFor)
	defer cancel()
	var wg sync.WaitGroup
	for w := range pools {
		wg.Go(func() {
			for _, rec := range pools[w] {
				if ctx.Err() != nil {
					return
				}
				_ = b.g.Release(ctx, releaseOf(rec))
			}
			if l := leases[w]; l != nil {
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
}

// releaseUntimedFor bounds releaseUntimed.
const releaseUntimedFor = 5 * time.Second

// setup runs fn on every caller, untimed: --op release's pool (claim says
// whether to grant one more: --ops in all, or for --duration), --op renew's
// one lease per caller.
func (b *bench) setup(ctx context.Context, cancel context.CancelCauseFunc,
	fn func(ctx context.Context, w int, claim func() bool, s *benchStats)) *SetupResult {
	f := b.f
	runCtx, stop := ctx, context.CancelFunc(func() {})
	if f.duration > 0 {
		runCtx, stop = context.WithTimeout(ctx, f.duration)
	}
	defer stop()
	var next atomic.Int64
	claim := func() bool { return runCtx.Err() == nil && (f.ops == 0 || next.Add(1) <= int64(f.ops)) }
	stats := make([]benchStats, f.clients)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range f.clients {
		wg.Go(func() { fn(ctx, w, claim, &stats[w]) })
	}
	wg.Wait()
	_, errs := mergeStats(stats)
	s := &SetupResult{ErrorKind: errs, Errors: total(errs), Elapsed: round3(time.Since(start).Seconds())}
	for _, st := range stats {
		s.Granted += st.ok
	}
	return s
}

func releaseOf(rec kvlease.Record) kvlease.ReleaseRequest {
	return kvlease.ReleaseRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token, Revision: rec.Revision, Secret: rec.Secret}
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// liveLease is one lease of --live, in the scheduler's heap by due time.
type liveLease struct {
	l     *kvlease.Lease
	due   time.Time
	index int // in the heap, -1 when out of it
	// state: liveOK while renewed; set once to lapsed, refused or released.
	state atomic.Int32
}

const (
	liveOK = iota
	liveLapsed
	liveRefused
	liveReleased
)

type dueHeap []*liveLease

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *dueHeap) Push(x any)        { x.(*liveLease).index = len(*h); *h = append(*h, x.(*liveLease)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	x.index = -1
	return x
}

// scheduler hands each lease to a worker when its renewal is due. Workers
// put leases back with push; one goroutine (run) pops the due ones. Nothing
// blocks while holding mu, so a worker pushing never waits for the
// dispatcher sending.
type scheduler struct {
	mu   sync.Mutex
	h    dueHeap
	wake chan struct{} // the earliest due time moved earlier
}

func newScheduler() *scheduler { return &scheduler{wake: make(chan struct{}, 1)} }

func (s *scheduler) push(x *liveLease) {
	s.mu.Lock()
	heap.Push(&s.h, x)
	first := s.h[0] == x
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// popDue pops the earliest lease if it is due at now, else returns nil.
func (s *scheduler) popDue(now time.Time) *liveLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.h) > 0 && !s.h[0].due.After(now) {
		return heap.Pop(&s.h).(*liveLease)
	}
	return nil
}

// overdue counts the leases whose renewal was due before now and that no
// worker has taken yet.
func (s *scheduler) overdue(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, x := range s.h {
		if x.due.Before(now) {
			n++
		}
	}
	return n
}

// run sends each lease to jobs when due, until ctx ends.
func (s *scheduler) run(ctx context.Context, jobs chan<- *liveLease) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s.mu.Lock()
		wait := time.Hour
		if len(s.h) > 0 {
			if wait = time.Until(s.h[0].due); wait <= 0 {
				x := heap.Pop(&s.h).(*liveLease)
				s.mu.Unlock()
				select {
				case jobs <- x:
					continue
				case <-ctx.Done():
					return
				}
			}
		}
		s.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
		case <-ctx.Done():
			return
		}
	}
}

// LiveResult is what --live prints.
type LiveResult struct {
	Via     string `json:"via"`
	URL     string `json:"url"`
	Leases  int    `json:"leases"`
	Clients int    `json:"clients"`
	TTL     string `json:"ttl"`
	Every   string `json:"renew_every"`
	For     string `json:"for"`

	Granted      int            `json:"granted"`
	GrantErrors  map[string]int `json:"grant_errors_by_kind"`
	GrantElapsed float64        `json:"grant_elapsed_s"`
	GrantPerSec  float64        `json:"grants_per_sec"`
	GrantLatency Latency        `json:"grant_latency"`
	KeepElapsed  float64        `json:"keep_elapsed_s"`
	Renewals     int            `json:"renewals"`         // over the whole run, grant phase included
	RenewPerSec  float64        `json:"renewals_per_sec"` // Renewals over the whole run's time
	// KeepRenewals and KeepRenewPerSec count the keep phase alone, the
	// time the CPU figures cover: with every lease granted, the rate the
	// deployment sustains (N every D/3 is what is due).
	KeepRenewals    int            `json:"keep_renewals"`
	KeepRenewPerSec float64        `json:"keep_renewals_per_sec"`
	Failures        int            `json:"renewal_failures"`
	FailureKind     map[string]int `json:"renewal_failures_by_kind"`
	Lapses          int            `json:"lapses"`
	Refused         int            `json:"refused"`
	LiveAtEnd       int            `json:"live_at_end"`
	RenewLatency    Latency        `json:"renew_latency"`
	Lateness        Latency        `json:"renew_lateness"`
	BenchCPU        float64        `json:"bench_cpu_cores"`
	Serve           *ServeFigures  `json:"serve,omitempty"`
	Released        int            `json:"released"`
	ReleaseErrors   map[string]int `json:"release_errors_by_kind,omitempty"`
	Ending          string         `json:"ending"`
	StoppedEarly    bool           `json:"stopped_early,omitempty"`
}

// ServeFigures are the serve process's CPU and memory over the keep phase.
type ServeFigures struct {
	PID      int     `json:"pid"`
	CPUCores float64 `json:"cpu_cores"` // CPU time over the keep phase / its wall time
	RSS      int64   `json:"rss_bytes"` // VmRSS at the end
	HWM      int64   `json:"hwm_bytes"` // VmHWM: the peak RSS since the process started
	// Exited: the process was gone at the end of the run (no figures).
	Exited bool `json:"exited,omitempty"`
}

func (r LiveResult) print(p printer) {
	if p.json {
		p.obj(r)
		return
	}
	p.line("bench live=%d via=%s url=%s clients=%d ttl=%s renew_every=%s for=%s", r.Leases, r.Via, r.URL, r.Clients, r.TTL, r.Every, r.For)
	p.line("grant granted=%d errors=%d elapsed=%.3fs grants_per_sec=%.1f errors_by_kind: %s", r.Granted, total(r.GrantErrors),
		r.GrantElapsed, r.GrantPerSec, kinds(r.GrantErrors))
	switch failed := total(r.GrantErrors); {
	case r.Granted == r.Leases || r.StoppedEarly:
	case r.Granted+failed >= r.Leases:
		p.line("grant incomplete: %d of %d granted, %d failed (errors_by_kind above)", r.Granted, r.Leases, failed)
	default:
		p.line("grant incomplete: %d of %d granted when the grant phase ended (--for after the start; renewals go first, so a node that cannot also renew more stops granting)",
			r.Granted, r.Leases)
	}
	p.line("grant latency %s", r.GrantLatency)
	p.line("keep elapsed=%.3fs renewals=%d renewals_per_sec=%.1f (the keep phase alone)",
		r.KeepElapsed, r.KeepRenewals, r.KeepRenewPerSec)
	p.line("run renewals=%d renewals_per_sec=%.1f failures=%d lapses=%d refused=%d live_at_end=%d (grant phase included)",
		r.Renewals, r.RenewPerSec, r.Failures, r.Lapses, r.Refused, r.LiveAtEnd)
	p.line("renew failures_by_kind: %s", kinds(r.FailureKind))
	p.line("renew latency %s", r.RenewLatency)
	p.line("renew lateness %s (sent after due)", r.Lateness)
	p.line("bench cpu=%.3f cores", r.BenchCPU)
	switch s := r.Serve; {
	case s == nil:
	case s.Exited:
		p.line("serve pid=%d exited during the run: no CPU or RSS figures", s.PID)
	default:
		p.line("serve pid=%d cpu=%.3f cores (over the keep phase)", s.PID, s.CPUCores)
		// The peak is the process's since it started, not the keep
		// phase's: printed under "(over the keep phase)" unlabelled, a
		// serve's earlier peak read as the run's (found by an outside
		// client).
		p.line("serve rss=%.1fMiB peak=%.1fMiB (since it started)", float64(s.RSS)/(1<<20), float64(s.HWM)/(1<<20))
	}
	if r.StoppedEarly {
		p.line("stopped early (interrupted)")
	}
	p.line("end %s released=%d release_errors_by_kind: %s", r.Ending, r.Released, kinds(r.ReleaseErrors))
}

// failure is the error a --live run exits with, if it failed: no lease
// granted, none live at the end, or the serve process it measured gone.
func (r LiveResult) failure() error {
	switch {
	case r.Granted == 0:
		return fmt.Errorf("%w: no lease granted", ErrBenchFailed)
	case r.Serve != nil && r.Serve.Exited:
		return fmt.Errorf("%w: serve process %d exited during the run", ErrBenchFailed, r.Serve.PID)
	case r.LiveAtEnd == 0 && !r.StoppedEarly:
		return fmt.Errorf("%w: no lease was live at the end (%d lapsed, %d refused)", ErrBenchFailed, r.Lapses, r.Refused)
	}
	return nil
}

// liveWorker is one worker's figures.
type liveWorker struct {
	grantLat, renewLat, late []time.Duration
	grantErrs, renewErrs     map[string]int
	renewals                 int
}

func count(m *map[string]int, err error) {
	if *m == nil {
		*m = map[string]int{}
	}
	(*m)[errorKind(err)]++
}

// runLive runs --live: grant, keep, then lapse or release.
func (b *bench) runLive(ctx context.Context, pid int, stderr io.Writer) (LiveResult, error) {
	f := b.f
	interval := kvlease.DefaultRenewInterval(f.ttl)
	retry := max(interval/10, 10*time.Millisecond) // as the keeper backs off
	attempt := min(interval/2, b.timeout)          // half an interval, as the keeper's (which caps it at 2 s, --timeout here)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	sched := newScheduler()
	jobs := make(chan *liveLease)
	all := make([]*liveLease, f.live)
	var nextGrant, granted, grantsDone, lapses, refused, renewals, failures, inFlight atomic.Int64
	allGranted := make(chan struct{})
	var grantedOnce sync.Once
	stop := make(chan struct{}) // the keep phase is over: workers return
	workers := make([]liveWorker, f.clients)
	start := time.Now()

	grant := func(w *liveWorker, i int) {
		actx, acancel := context.WithTimeout(ctx, b.timeout)
		t := time.Now()
		l, err := kvlease.Acquire(actx, b.g, b.name("live", i), b.holderOf(0, i), f.ttl)
		d := time.Since(t)
		acancel()
		if err != nil {
			count(&w.grantErrs, err)
			if fatalBenchError(err) {
				cancel(err)
			}
		} else {
			w.grantLat = append(w.grantLat, d)
			x := &liveLease{l: l, due: t.Add(interval), index: -1}
			all[i] = x
			granted.Add(1)
			sched.push(x)
		}
		if grantsDone.Add(1) == int64(f.live) {
			grantedOnce.Do(func() { close(allGranted) })
		}
	}
	renew := func(w *liveWorker, x *liveLease) {
		t := time.Now()
		w.late = append(w.late, max(t.Sub(x.due), 0))
		actx, acancel := context.WithTimeout(ctx, attempt)
		inFlight.Add(1)
		err := x.l.Renew(actx)
		inFlight.Add(-1)
		d := time.Since(t)
		acancel()
		if err == nil {
			w.renewals++
			renewals.Add(1)
			w.renewLat = append(w.renewLat, d)
			x.due = t.Add(interval)
			sched.push(x)
			return
		}
		count(&w.renewErrs, err)
		failures.Add(1)
		switch {
		case errors.Is(err, kvlease.ErrExpired) || x.l.Remaining() <= 0:
			x.state.Store(liveLapsed)
			lapses.Add(1)
		case errors.Is(err, kvlease.ErrUnavailable):
			x.due = time.Now().Add(retry)
			sched.push(x)
		default:
			x.state.Store(liveRefused)
			refused.Add(1)
		}
	}

	dctx, dstop := context.WithCancel(ctx)
	var dispatcher sync.WaitGroup
	dispatcher.Go(func() { sched.run(dctx, jobs) })
	var wg sync.WaitGroup
	for i := range f.clients {
		w := &workers[i]
		wg.Go(func() {
			for {
				select { // renewals first
				case x := <-jobs:
					renew(w, x)
					continue
				case <-stop:
					return
				default:
				}
				// The dispatcher hands out one lease at a time: one due
				// now may still be in the heap. It goes first.
				if x := sched.popDue(time.Now()); x != nil {
					renew(w, x)
					continue
				}
				if i := nextGrant.Add(1) - 1; i < int64(f.live) && ctx.Err() == nil {
					grant(w, int(i))
					continue
				}
				select {
				case x := <-jobs:
					renew(w, x)
				case <-stop:
					return
				}
			}
		})
	}

	progress := time.NewTicker(benchProgressEvery)
	defer progress.Stop()
	report := func(phase string) {
		fmt.Fprintf(stderr, "bench: %s %.0fs granted=%d/%d renewals=%d failures=%d lapses=%d refused=%d in_flight=%d overdue=%d\n",
			phase, time.Since(start).Seconds(), granted.Load(), f.live, renewals.Load(), failures.Load(), lapses.Load(), refused.Load(),
			inFlight.Load(), sched.overdue(time.Now()))
	}
	grantLimit := time.NewTimer(f.keepFor)
	defer grantLimit.Stop()
	stoppedEarly := false
wait:
	for {
		select {
		case <-allGranted:
			break wait
		case <-grantLimit.C:
			break wait
		case <-progress.C:
			report("granting")
		case <-ctx.Done():
			stoppedEarly = true
			break wait
		}
	}
	nextGrant.Store(int64(f.live)) // no grant starts after the grant phase
	grantEnd := time.Now()
	keepStart := grantEnd
	renewalsBefore := renewals.Load()
	cpu0, _ := readProcCPU(pid)
	self0 := selfCPU()
	keep := time.NewTimer(f.keepFor)
	defer keep.Stop()
	if !stoppedEarly && granted.Load() > 0 { // nothing to keep if every grant failed
	keeping:
		for {
			select {
			case <-keep.C:
				break keeping
			case <-progress.C:
				report("keeping")
			case <-ctx.Done():
				stoppedEarly = true
				break keeping
			}
		}
	}
	dstop()
	dispatcher.Wait()
	close(stop)
	wg.Wait()
	keepEnd := time.Now()
	keepWall := keepEnd.Sub(keepStart)
	cpu1, cpuErr := readProcCPU(pid)
	self1 := selfCPU()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return LiveResult{}, fmt.Errorf("bench --live: %w", err)
	}

	r := LiveResult{Via: b.via, URL: b.url, Leases: f.live, Clients: f.clients, TTL: f.ttl.String(), Every: interval.Round(time.Millisecond).String(),
		For: f.keepFor.String(), Granted: int(granted.Load()), GrantElapsed: round3(grantEnd.Sub(start).Seconds()),
		KeepElapsed: round3(keepWall.Seconds()), StoppedEarly: stoppedEarly}
	if keepWall >= 10*time.Millisecond { // else there was no keep phase to measure
		r.BenchCPU = round3((self1 - self0).Seconds() / keepWall.Seconds())
	}
	r.GrantPerSec = math.Round(float64(r.Granted)/grantEnd.Sub(start).Seconds()*10) / 10
	var grantLat, renewLat, late []time.Duration
	r.GrantErrors, r.FailureKind = map[string]int{}, map[string]int{}
	for _, w := range workers {
		grantLat = append(grantLat, w.grantLat...)
		renewLat, late = append(renewLat, w.renewLat...), append(late, w.late...)
		r.Renewals += w.renewals
		for k, n := range w.grantErrs {
			r.GrantErrors[k] += n
		}
		for k, n := range w.renewErrs {
			r.FailureKind[k] += n
		}
	}
	r.Failures = total(r.FailureKind)
	r.RenewPerSec = math.Round(float64(r.Renewals)/keepEnd.Sub(start).Seconds()*10) / 10
	r.KeepRenewals = int(renewals.Load() - renewalsBefore)
	r.KeepRenewPerSec = math.Round(float64(r.KeepRenewals)/keepWall.Seconds()*10) / 10
	r.GrantLatency, r.RenewLatency, r.Lateness = summarize(grantLat), summarize(renewLat), summarize(late)
	// A lease still waiting for a worker when its deadline passed lapsed too.
	var live []*liveLease
	for _, x := range all {
		if x == nil || x.state.Load() != liveOK {
			continue
		}
		if x.l.Remaining() <= 0 {
			x.state.Store(liveLapsed)
			lapses.Add(1)
			continue
		}
		live = append(live, x)
	}
	r.Lapses, r.Refused, r.LiveAtEnd = int(lapses.Load()), int(refused.Load()), len(live)
	if pid != 0 {
		s := &ServeFigures{PID: pid}
		var err error
		if s.RSS, s.HWM, err = readProcMemory(pid); err != nil || cpuErr != nil {
			s.Exited, s.RSS, s.HWM = true, 0, 0
		} else if cpu1 >= cpu0 && keepWall >= 10*time.Millisecond {
			s.CPUCores = round3((cpu1 - cpu0).Seconds() / keepWall.Seconds())
		}
		r.Serve = s
	}
	r.Ending = fmt.Sprintf("leases left to lapse by their TTL (%v + the grantor margin)", f.ttl)
	if f.release {
		r.Ending = "leases released"
		r.Released, r.ReleaseErrors = b.releaseAll(live)
	}
	return r, nil
}

// releaseAll releases the leases from --clients callers.
func (b *bench) releaseAll(live []*liveLease) (int, map[string]int) {
	var next atomic.Int64
	var mu sync.Mutex
	released, errs := 0, map[string]int{}
	var wg sync.WaitGroup
	for range b.f.clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(live) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
				err := live[i].l.Release(ctx)
				cancel()
				mu.Lock()
				if err != nil {
					errs[errorKind(err)]++
				} else {
					released++
					live[i].state.Store(liveReleased)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return released, errs
}

// readProcCPU returns the CPU time (user + system) process pid has used,
// from /proc/PID/stat; 0 and no error for pid 0.
func readProcCPU(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("no such process")
		}
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat returns utime + stime of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may hold spaces and parentheses:
// the fields are counted after its last ')'.
func parseProcStat(s string) (time.Duration, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable /proc stat %q", s)
	}
	fields := strings.Fields(s[i+1:]) // from field 3 (state)
	if len(fields) < 13 {
		return 0, fmt.Errorf("unreadable /proc stat %q", s)
	}
	utime, err1 := strconv.ParseInt(fields[14-3], 10, 64)
	stime, err2 := strconv.ParseInt(fields[15-3], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("unreadable /proc stat: %w", err)
	}
	return time.Duration(utime+stime) * time.Second / userHZ, nil
}

// readProcMemory returns VmRSS and VmHWM of process pid, in bytes.
func readProcMemory(pid int) (rss, hwm int64, err error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	return parseProcStatus(fh)
}

// parseProcStatus reads VmRSS and VmHWM ("VmRSS:   1234 kB") from a
// /proc/PID/status file. A process that has exited but not been reaped (a
// zombie) has neither: an error.
func parseProcStatus(r io.Reader) (rss, hwm int64, err error) {
	sc := bufio.NewScanner(r)
	seen := false
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("unreadable /proc status line %q", sc.Text())
		}
		if key == "VmRSS" {
			rss, seen = kb<<10, true
		} else {
			hwm = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if !seen {
		return 0, 0, errors.New("no VmRSS in /proc status: the process has exited")
	}
	return rss, hwm, nil
}

// selfCPU returns the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
