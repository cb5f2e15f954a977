package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
)

func newElect(stdout, stderr io.Writer) *cobra.Command {
	var c connFlags
	var mf metricsFlags
	var ttl, grace time.Duration
	var bucket string
	var verbose bool
	cmd := &cobra.Command{
		Use:   "elect NAME [--ttl D] -- COMMAND [ARGS...]",
		Short: "Campaign for leadership of NAME; run a command while leading",
		Long: `elect waits until this candidate leads election NAME (a lease), then runs
COMMAND as "leased run" does: LEASED_TOKEN in its environment, renewed while
it runs, stopped (SIGTERM, then SIGKILL after --grace, before the holder's
deadline) the moment leadership is lost. While another candidate leads it
waits on the bucket's stream for the end of that leadership: no polling; it
says who leads as it starts waiting and at each change of leader. It
needs JetStream access to the lease bucket. The exit code is the command's,
as for "leased run" (5 if leadership was lost and the command, catching the
SIGTERM, exited 0); stopped (SIGINT, SIGTERM, SIGHUP) while waiting to lead, it
exits 1, saying the command did not run.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 || len(args) < 2 {
				return usageError{errors.New("want NAME -- COMMAND [ARGS...]")}
			}
			if err := checkCommand(args[1:]); err != nil {
				return err
			}
			return grantor.ValidateName(args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			grace, margin, err := graceTiming(ttl, grace)
			if err != nil {
				return err
			}
			if err := kvlease.ValidateBucket(bucket); err != nil {
				// Checked once connected, it said "grantor unavailable",
				// exit 1, with no server, as history did.
				return usageError{fmt.Errorf("--bucket: %w", err)}
			}
			name := args[0]
			stopMetrics, err := c.startMetrics(cmd.Context(), mf, "leased-elect", stderr)
			if err != nil {
				return err
			}
			defer stopMetrics()
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				st, err := c.openStore(ctx, nc, bucket)
				if err != nil {
					return err
				}
				e, err := election.New(st, name)
				if err != nil {
					return usageError{err}
				}
				return superviseUnderLease(ctx, &c, name, grace, verbose, args[1:], stdout, stderr,
					func(ctx context.Context, opts ...kvlease.KeeperOption) (*kvlease.Keeper, error) {
						stopSaying := sayLeaders(ctx, e, c.holder, stderr, c.output)
						defer stopSaying()
						gw := grantorWait{e: e, log: newLineLog(stderr, c.output)}
						defer gw.stop()
						lead, err := e.Campaign(ctx, c.holder, ttl, kvlease.WithLease(kvlease.WithHolderMargin(margin)), kvlease.WithKeeper(opts...),
							kvlease.WithOnUnavailable(func(err error) { gw.unavailable(ctx, err) }))
						if err != nil {
							return nil, err
						}
						gw.answered()
						return lead.Keeper, nil
					})
			})
		},
	}
	c.register(cmd.Flags())
	mf.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	cmd.Flags().DurationVar(&ttl, "ttl", defaultTTL, "leadership "+ttlUsage)
	cmd.Flags().DurationVar(&grace, "grace", 0, "time between SIGTERM and SIGKILL, ending before the holder's deadline (default: TTL/10, at most 2s)")
	cmd.Flags().StringVar(&bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log every renewal with the new deadline")
	return cmd
}

// grantorWait says once that the grantor does not answer (a cluster
// without a quorum can take minutes), then that it answers again: it
// asks every grantorProbe until it does. It said the first alone, and a
// candidate left waiting for a leader once the grantor was back said
// nothing more (found by an outside client).
type grantorWait struct {
	e   *election.Election
	log lineLog

	mu      sync.Mutex
	waiting bool
	cancel  context.CancelFunc // the probe's
	wg      sync.WaitGroup
}

// grantorProbe spaces the reads that look for the grantor's answer.
const grantorProbe = time.Second

// unavailable is the campaign's OnUnavailable.
func (g *grantorWait) unavailable(ctx context.Context, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting {
		return
	}
	g.waiting = true
	g.log.print(slog.LevelWarn, "waiting for the grantor, which does not answer: "+api.Message(err))
	if g.cancel != nil {
		g.cancel() // the last probe's, which has returned
	}
	pctx, cancel := context.WithCancel(ctx)
	g.cancel = cancel
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		t := time.NewTicker(grantorProbe)
		defer t.Stop()
		for {
			select {
			case <-t.C:
			case <-pctx.Done():
				return
			}
			rctx, rcancel := context.WithTimeout(pctx, grantorProbe)
			_, err := g.e.Leader(rctx)
			rcancel()
			if err == nil || errors.Is(err, kvlease.ErrNotFound) {
				g.answered()
				return
			}
		}
	}()
}

// answered says the grantor answers again if it was said not to.
func (g *grantorWait) answered() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting {
		g.waiting = false
		g.log.print(slog.LevelInfo, "the grantor answers again")
	}
}

// stop ends the probe and waits for it.
func (g *grantorWait) stop() {
	g.mu.Lock()
	if g.cancel != nil {
		g.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// sayLeaders logs who leads election e, and each new leader, while this
// candidate (self) waits: a waiting elect said nothing, even with -v, where
// client-go's leader election says "new leader elected" and Curator lists
// the participants (found by an outside client). stop ends it, and returns
// once it has: no such line comes after the command has started.
//
// A leader of this candidate's own name is said to be one at the start
// only: it began its watch before it returns, so that leader, shown by
// the watch's replay, held the lease before this candidate asked for it
// (another process started with the same --holder, or one that did not
// release); later it may be this candidate, which wins. A candidate
// started with the current leader's name waited without a word (found by
// an outside client).
func sayLeaders(ctx context.Context, e *election.Election, self string, stderr io.Writer, format string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	changes, err := e.Observe(ctx)
	if err != nil {
		cancel()
		return func() {} // the campaign says why, as it meets the same trouble
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		log, _ := newLogger(stderr, format, slog.LevelInfo) // format was checked with the flags
		log = log.With("lease", e.Name())
		first := true
		for ch := range changes {
			switch {
			case ch.Leader == nil || ctx.Err() != nil: // none once stopped: this candidate may lead
			case ch.Leader.Holder != self:
				log.Info("waiting: another candidate leads", "leader", ch.Leader.Holder, "token", uint64(ch.Leader.Token))
			case first:
				log.Warn("waiting: the leader has this candidate's own name: another process with the same --holder leads, or an earlier run that did not release (its lease lapses at its TTL)",
					"leader", ch.Leader.Holder, "token", uint64(ch.Leader.Token))
			}
			first = false
		}
	}()
	return func() { cancel(); <-done }
}
