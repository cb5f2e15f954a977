package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

// exitStatus carries a child's exit code out of `leased run`.
type exitStatus int

func (e exitStatus) Error() string { return "command exited with status " + strconv.Itoa(int(e)) }

func newRun(stdout, stderr io.Writer) *cobra.Command {
	var c connFlags
	var mf metricsFlags
	var lease string
	var ttl, grace time.Duration
	var verbose bool
	cmd := &cobra.Command{
		Use:   "run --lease NAME [--ttl D] -- COMMAND [ARGS...]",
		Short: "Run a command only while holding a lease",
		Long: `run acquires the lease, then starts COMMAND with LEASED_LEASE, LEASED_TOKEN
(the fencing token) and LEASED_HOLDER in its environment, and renews the
lease while the command runs. The moment the lease is lost (a renewal is
refused, e.g. after revocation, or the server cannot be reached before the
holder's deadline) it sends the command SIGTERM, then SIGKILL after --grace.
The grace is carved out of the lease: run gives up --grace before the
holder's deadline, so that the command is gone by the deadline.

The command runs in a process group of its own: stopping it stops everything
it started (what left the group, with setsid, gets SIGKILL before the
lease is released). If run itself is killed, even with SIGKILL, that whole group is
killed too (by a guard process between run and the command); if run is
stopped (SIGSTOP, Ctrl-Z), the guard kills the group at the command's
deadline. At a terminal run reads, run alone in its process group, the
command has the terminal while it runs, as a shell's job: Ctrl-C and
Ctrl-Z go to it (Ctrl-Z stops run's job with it).

The command does not get run's own secrets: LEASED_PASSWORD, LEASED_SECRET
and LEASED_GOSSIP_KEY are taken out of its environment, and any user,
password or token out of the URLs in LEASED_URL.

The exit code is the command's (128+signal if it was stopped, 127 if it was
not found, 126 if it could not be run, as env and timeout give them; 5 if it
was stopped because the lease was lost and exited 0
all the same, having caught the SIGTERM, if its exit 0 was seen only after
the lease's deadline (run stopped meanwhile), or if the lease's deadline
passed before it could start), or 3 if the lease was held by someone else and the
command never started. On SIGINT, SIGTERM or SIGHUP, run stops the command the same way
(SIGTERM, then SIGKILL after --grace) and releases the lease. A second one
ends run at once (killed by it): the command's group gets SIGKILL, its grace
cut short, and the lease, not released, lapses at its TTL.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if at := cmd.ArgsLenAtDash(); at > 0 {
				// `run NAME -- cmd`: elect's form (found by an outside client).
				return usageError{fmt.Errorf("the lease is --lease NAME, not an argument (got %q before --)", args[0])}
			}
			if cmd.ArgsLenAtDash() != 0 || len(args) == 0 {
				return usageError{errors.New("want -- COMMAND [ARGS...] after the flags")}
			}
			if err := checkCommand(args); err != nil {
				return err
			}
			if lease == "" {
				return usageError{errors.New("--lease is required")}
			}
			return kvlease.ValidateName(lease)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			grace, margin, err := graceTiming(ttl, grace)
			if err != nil {
				return err
			}
			stopMetrics, err := c.startMetrics(cmd.Context(), mf, "leased-run", stderr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				return runHolding(ctx, &c, nc, lease, ttl, margin, grace, verbose, args, stdout, stderr)
			})
		},
	}
	c.register(cmd.Flags())
	mf.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	cmd.Flags().StringVar(&lease, "lease", "", "lease to hold while the command runs (required)")
	cmd.Flags().DurationVar(&ttl, "ttl", defaultTTL, ttlUsage)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every renewal with the new deadline")
	cmd.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL, ending before the holder's deadline (default: TTL/10, at most 2s)")
	return cmd
}

func runHolding(ctx context.Context, c *connFlags, nc *nats.Conn, name string, ttl, margin, grace time.Duration,
	verbose bool, args []string, stdout, stderr io.Writer) error {
	return superviseUnderLease(ctx, c, name, grace, verbose, args, stdout, stderr,
		func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
			client, err := c.client(nc)
			if err != nil {
				return nil, err
			}
			gctx, cancel := c.grantContext(ctx)
			l, err := kvlease.Acquire(gctx, client, name, c.holder, ttl, kvlease.WithHolderMargin(margin),
				kvlease.WithClockGuard(client.Clock().Exceeds))
			cancel()
			if err != nil {
				return nil, err
			}
			warned := false
			opts = append(opts, kvlease.WithOnRenew(func(kvlease.Record, time.Time) {
				if !warned && client.Clock().Warns(kvlease.DefaultClockRate) {
					warned = true
					_, _, rate, bound, _ := client.Clock().Estimate()
					newLineLog(stderr, c.output).print(slog.LevelWarn, fmt.Sprintf("warning: clock rate error against the grantor %.2g ± %.2g "+
						"is past half the lease's bound %g; at the bound the lease stops counting as held", rate, bound, kvlease.DefaultClockRate))
				}
			}))
			opts = append(opts, renewOnEnd(ctx, client, l)...)
			k, err := kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
			if err != nil {
				_ = l.Release(context.Background())
			}
			return k, err
		})
}

// superviseUnderLease takes the lease with take, runs the command while it
// is held, and stops the command (SIGTERM, then SIGKILL after grace) the
// moment it is lost. Shared by `run` and `elect`.
func superviseUnderLease(ctx context.Context, c *connFlags, name string, grace time.Duration, verbose bool,
	args []string, stdout, stderr io.Writer,
	take func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error)) error {
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	log, _ := newLogger(stderr, c.output, level) // -o json: its log lines are JSON objects (checked)
	log = log.With("lease", name)
	log.Debug("taking the lease") // elect: waiting while another candidate leads
	// The command's guard, once it has started: each renewal extends the
	// command's deadline there.
	var commandGuard atomic.Pointer[guarded]
	failed := 0 // renewals failed since the last that succeeded; the keeper's goroutine's
	k, err := take(ctx, append(c.keeperOptions(), kvlease.WithOnRenew(func(_ kvlease.Record, deadline time.Time) {
		if g := commandGuard.Load(); g != nil {
			g.extend(commandDeadline(func() time.Duration { return time.Until(deadline) + grace }))
		}
		// The deadline the command must be gone by, and when it is sent
		// SIGTERM if no renewal comes (the keeper's own deadline, earlier by
		// the grace: a loss is logged then, "expired" against it).
		attrs := []any{"deadline", deadline.Add(grace).Format(time.RFC3339Nano), "sigterm_at", deadline.Format(time.RFC3339Nano)}
		if failed > 0 {
			// After "renewal failed; trying again … sigterm_in=…" the log
			// said nothing more: whether the command was stopped or the
			// lease kept could not be told from it (found trying it, the
			// server restarted under run).
			log.Info("renewed", append(attrs, "after_failures", failed)...)
			failed = 0
			return
		}
		log.Debug("renewed", attrs...)
	}), kvlease.WithOnRenewFailure(func(err error, remaining time.Duration) {
		if deniedCause(ctx) != nil {
			// The server refused the renewal (its permissions), which
			// ends the command and is said then: it is not tried again.
			return
		}
		failed++
		// Without it a loss after a failover left no trail of the
		// attempts before it (found by an outside client).
		log.Info("renewal failed; trying again", "err", err, "sigterm_in", remaining.Round(time.Millisecond))
	}))...)
	if err != nil && ctx.Err() != nil {
		// Interrupted (SIGINT, SIGTERM) while waiting for the lease.
		return fmt.Errorf("stopped before %s was held: the command did not run", name)
	}
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		// Stopped as the lease was taken (its grant answered, the change
		// events subscribed to): the command was started all the same,
		// then sent SIGTERM (found reading run with the signals in mind).
		rctx, cancel := releaseContext(ctx, k.Lease(), c.timeout, releaseNotice(log))
		defer cancel()
		if err := k.Close(rctx); err != nil {
			log.Warn("release failed", "err", err)
		}
		return fmt.Errorf("stopped as %s was taken: the command did not run", name)
	}
	l := k.Lease()
	// The command gets a process group of its own, so that stopping it
	// stops what it started too; the guard between run and it kills that
	// group if run dies (see guardCommand).
	env := append(commandEnv(os.Environ()),
		"LEASED_LEASE="+name,
		"LEASED_TOKEN="+strconv.FormatUint(uint64(l.Token()), 10),
		"LEASED_HOLDER="+c.holder)
	// The guard kills the command's group at its deadline unless run, with
	// each renewal, has sent it a later one (see guard).
	remaining := func() time.Duration { return l.Remaining() + grace }
	g, started, err := startGuarded(args, env, commandDeadline(remaining), os.Stdin, stdout, stderr, c.output)
	if err != nil {
		_ = k.Close(context.Background())
		newLineLog(stderr, c.output).print(slog.LevelError, fmt.Sprintf("start %s: %v", args[0], err))
		return exitStatus(127) // as shells do for a command that cannot run
	}
	defer g.close()
	commandGuard.Store(g)
	g.extend(commandDeadline(remaining)) // a renewal made while the guard started

	if !started { // the guard said why
		_, err := g.wait()
		_ = k.Close(context.Background())
		return err
	}
	pgid := g.pid
	log.Info("holding lease; command started", "token", l.Token(), "pid", pgid,
		"deadline", l.Deadline().Add(grace).Format(time.RFC3339Nano))
	// At a terminal, the command has it while it runs (see terminal).
	term := foreground(pgid)
	defer term.giveBack()
	exited := make(chan error, 1)
	var seenLate atomic.Bool // the command's exit seen by the guard only after its deadline
	go func() {
		late, err := g.wait()
		seenLate.Store(late)
		term.giveBack()
		exited <- err
	}()

	var waitErr error
	counted := false // the loss counted as an expiry during work
	select {
	case waitErr = <-exited:
		// The command is done; what it left running must not outlive the
		// lease, which is released next.
		reapGroup(pgid, grace)
	case <-k.Done():
		ended := false
		select {
		case waitErr = <-exited:
			ended = true // on its own, as the lease was lost: its own status
		default:
			// Exited already, its status not read yet: run, stopped past
			// the deadline after the command's exit in time, saw the loss
			// first as it resumed, sent SIGTERM to a command long gone and
			// took its 0 for one after the loss, exit 5 (found by an
			// outside client, 5 of 8 such runs). The guard keeps the
			// command a zombie until it exits itself (waitCommand); one
			// not seen as a zombie (gone, or no /proc) is stopped as before.
			if state, _, _, ok := procStat(pgid); ok && !alive(pgid, state) {
				waitErr, ended = <-exited, true
			}
		}
		if ended {
			reapGroup(pgid, time.Until(killTime(l, grace)))
			break
		}
		_ = l.Check() // the command was at work when the lease ended: counted (leased.expiries_during_work)
		counted = true
		killAt := killTime(l, grace)
		// An expiry's "expired … ago" counts from sigterm_at, run's own
		// deadline, the grace before the command's (it read as at odds
		// with the deadline logged: found by an outside client).
		log.Warn("lease lost; stopping the command", "reason", k.Err(),
			"sigterm_at", l.Deadline().Format(time.RFC3339Nano),
			"deadline", l.Deadline().Add(grace).Format(time.RFC3339Nano), "kill_at", killAt.Format(time.RFC3339Nano))
		g.stopping()
		if waitErr = stop(pgid, exited, time.Until(killAt)); waitErr == nil {
			// It caught the SIGTERM and exited 0: stopped all the same,
			// its work cut short, which a caller must not take for success.
			log.Warn("the command exited 0 after the lease was lost; exiting 5 (lost the lease)")
			waitErr = exitStatus(ExitLost)
		}
	case <-ctx.Done():
		g.stopping()
		waitErr = stop(pgid, exited, time.Until(killTime(l, grace)))
	}
	if seenLate.Load() && !counted {
		// The command ran on past the lease's deadline (run stopped, and
		// the guard killed it there, or its exit seen only after it): the
		// lease was lost while it worked, whichever run saw first. It
		// counted none: only a loss run saw before the command's exit was
		// (found by an operator, run paused with SIGSTOP).
		_ = l.Check()
	}
	if waitErr == nil && seenLate.Load() {
		// Its exit was seen only after its deadline: run (and the guard)
		// were stopped, or the machine suspended, meanwhile, and the
		// command may have worked on without the lease, which a 0 must
		// not hide. It exited 0 (found by an outside client, 2 of 3 runs
		// with run, the guard and the command stopped and resumed).
		log.Warn("the command exited 0, seen only after the lease's deadline had passed; exiting 5 (lost the lease)")
		waitErr = exitStatus(ExitLost)
	}
	// Before the release: the guard kills what is left, what left the
	// command's group too, so that nothing the command started outlives
	// the lease.
	g.close()
	if deadlineLoss(k.Err()) {
		// No renewal was answered: the release has no better chance, and
		// waiting out its attempt made run exit some 3 s past its deadline
		// (found by an outside client, its server paused).
		releaseAfterLoss(ctx, k)
		return childStatus(waitErr)
	}
	rctx, cancel := releaseContext(ctx, l, c.timeout, releaseNotice(log))
	defer cancel()
	if err := k.Close(rctx); err != nil {
		if perr := permissionCause(ctx, err); errors.Is(perr, ErrPermissionDenied) {
			// It said "release failed … context canceled": the refusal
			// cancels the release, which was never sent.
			log.Warn("release refused; the lease stays held until its TTL lapses", "err", perr)
		} else {
			log.Warn("release failed", "err", err)
		}
	}
	return childStatus(waitErr)
}

// checkCommand refuses an empty COMMAND before the lease is taken: run and
// elect took the lease, then could not start it (exit 126), and a
// waiting candidate had to wait out that tenure for nothing.
func checkCommand(args []string) error {
	if args[0] == "" {
		return usageError{errors.New("empty COMMAND after --")}
	}
	return nil
}

// killTime is when a command stopped now gets SIGKILL: a grace from now,
// but no later than its deadline (the lease's, plus the grace carved out
// of it). A holder that learns late that it must stop (it was paused past
// the deadline) kills at once, the deadline long gone.
func killTime(l *kvlease.Lease, grace time.Duration) time.Time {
	at := time.Now().Add(grace)
	if d := l.Deadline().Add(grace); d.Before(at) {
		return d
	}
	return at
}

// graceTiming defaults --grace (TTL/10, at most 2 s) and returns the holder
// margin that carves it out of the lease, checking that a lease of ttl can
// still be kept with it.
func graceTiming(ttl, grace time.Duration) (time.Duration, time.Duration, error) {
	if ttl <= 0 {
		return 0, 0, usageError{fmt.Errorf("--ttl %v: want a positive duration", ttl)}
	}
	if grace < 0 {
		return 0, 0, usageError{fmt.Errorf("--grace %v is negative", grace)}
	}
	defaulted := grace == 0
	if defaulted {
		grace = min(2*time.Second, ttl/10)
	}
	margin := kvlease.DefaultHolderMargin(ttl) + grace
	if err := kvlease.ValidateTiming(ttl, margin, kvlease.DefaultRenewInterval(ttl), kvlease.DefaultClockRate); err != nil {
		if defaulted {
			return 0, 0, usageError{fmt.Errorf("--ttl %v is too short for a command's lease (with the default --grace, %v): %w", ttl, grace, err)}
		}
		return 0, 0, usageError{fmt.Errorf("--grace %v does not fit a %v lease: %w", grace, ttl, err)}
	}
	return grace, margin, nil
}

// stop sends the command's process group pgid SIGTERM, then SIGKILL when
// the grace ends (at once if it is not positive), and returns the
// command's status (from exited). Whatever else of the group is still
// running when the command exits gets the rest of the grace, then SIGKILL:
// nothing the command started outlives the lease.
func stop(pgid int, exited <-chan error, grace time.Duration) error {
	end := time.Now().Add(grace)
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // a stopped command acts on it only once continued, as shells do
	t := time.NewTimer(grace)
	defer t.Stop()
	var err error
	select {
	case err = <-exited:
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		err = <-exited
	}
	reapGroup(pgid, time.Until(end))
	return err
}

// reapGroup stops what is left of a process group: SIGTERM, then SIGKILL
// after grace. The group's members are not our children, so there is no
// event for their exit: it checks every 20 ms.
func reapGroup(pgid int, grace time.Duration) {
	if !groupLive(pgid) {
		return // nothing left
	}
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
	for end := time.Now().Add(grace); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !groupLive(pgid) {
			return
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func childStatus(err error) error {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return err
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitStatus(128 + int(ws.Signal()))
	}
	return exitStatus(ee.ExitCode())
}

// renewOnEnd is the keeper option that makes a revocation the service
// announces a loss at once, not at the next renewal (D/3 later); none if
// the subscription cannot be made (the loss is then found at the renewal).
func renewOnEnd(ctx context.Context, cl *client.Client, l *kvlease.Lease) []kvlease.KeeperOption {
	ends, err := cl.Ends(ctx, l.Name(), l.Token())
	if err != nil {
		return nil
	}
	return []kvlease.KeeperOption{kvlease.WithRenewNow(ends)}
}

// secretEnv are the variables of leased's own secrets (the NATS password,
// a lease's secret), which a command run under a lease does not get: it
// is given the lease's token to fence its writes with, not the means to
// renew, release or connect as run does.
var secretEnv = []string{"LEASED_PASSWORD", "LEASED_SECRET", gossipKeyEnv}

// commandEnv is env without secretEnv, and with no credentials in
// LEASED_URL.
func commandEnv(env []string) []string {
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(secretEnv, name)
	})
	for i, kv := range env {
		if url, ok := strings.CutPrefix(kv, "LEASED_URL="); ok {
			env[i] = "LEASED_URL=" + redact.WithoutCredentials(url)
		}
	}
	return env
}
