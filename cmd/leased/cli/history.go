package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
)

func newHistory(stdout io.Writer) *cobra.Command {
	var c connFlags
	var bucket string
	var since string
	cmd := &cobra.Command{
		Use:   "history [PREFIX]",
		Short: "Who held which lease when: one row per tenure, from the grantor's history",
		Long: `history prints the tenures of the leases whose names start with PREFIX (all
if none) that the grantor's history holds since --since (ago, or a time): one row per tenure,
with its holder, token, start and end, how long it was held, the renewals its
observer saw (counted when the tenure ends: "-" while live, and no
"renewals" with -o json), how it ended (released, revoked, expired, removed by gossip; live
if it has not) and whether the lease was flapping; a lease granted before
--since ago and live now is listed too (--since 0s: those alone; a time after now is
refused). It reads the history stream
(LEASED_HISTORY_<bucket>) and the lease bucket directly, so it needs
JetStream access to both; the
cluster's observer node writes it (serve --history-retention, default 24h).`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			from, err := historySince(since, time.Now())
			if err != nil {
				return err
			}
			if err := kvlease.ValidatePrefix(prefix); err != nil {
				return usageError{err}
			}
			if err := grantorsOwn("PREFIX", prefix); err != nil {
				// It printed an empty table, exit 0, as ls did (s21b).
				return err
			}
			if err := kvlease.ValidateBucket(bucket); err != nil {
				// It said "grantor unavailable: invalid stream name", exit
				// 1 (found by an outside client).
				return usageError{fmt.Errorf("--bucket: %w", err)}
			}
			// The live leases are optional (the bucket): a user allowed the
			// history only gets a warning. Its refusal ended the command
			// (exit 7), and the warning said "context canceled" (found by
			// an outside client).
			liveCtx, liveDenied := context.WithCancelCause(cmd.Context())
			defer liveDenied(nil)
			c.optional = func(pe *PermissionError) bool {
				if strings.Contains(pe.Subject, ".KV_"+bucket) || strings.HasPrefix(pe.Subject, "$KV."+bucket+".") {
					liveDenied(pe)
					return true
				}
				return false
			}
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				js, err := jetstream.New(nc)
				if err != nil {
					return err
				}
				octx, cancel := context.WithTimeout(ctx, c.timeout)
				defer cancel()
				h, err := history.Open(octx, js, bucket, history.Options{})
				if errors.Is(err, kvlease.ErrNotFound) {
					// No history stream: a failure (exit 1), as watch and
					// status say of a missing bucket, not "no such live
					// lease" (exit 4).
					return fmt.Errorf("no history of bucket %q: its stream %s is missing (a grantor of the bucket creates it)",
						bucket, history.StreamName(bucket))
				}
				if err != nil {
					return err
				}
				// --timeout bounds each wait, not the whole read of a
				// history however long (found by an outside client).
				recs, err := h.ReadIdle(ctx, prefix, from, c.timeout)
				if err != nil {
					return historyReadHint(err, h.Replicas())
				}
				// Tenures granted before the window and live through it
				// have no record in it: the bucket has them. Without it
				// (a user allowed the history only), the window's rows.
				lctx, stop := context.WithCancel(ctx)
				defer stop()
				defer context.AfterFunc(liveCtx, stop)()
				live, err := liveLeases(lctx, &c, nc, bucket, prefix)
				if err != nil {
					err = permissionCause(liveCtx, err)
					fmt.Fprintf(cmd.ErrOrStderr(), "leased: warning: the live leases were not read (%s): a lease granted before --since and still live is not listed\n",
						api.Message(err))
				}
				recs = append(recs, history.Live(live)...)
				printTenures(c.printer(stdout), history.Fold(recs), time.Now())
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	cmd.Flags().StringVar(&bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	cmd.Flags().StringVar(&since, "since", "1h", "how far back to look: a duration (30m, 24h) or an RFC 3339 time")
	return cmd
}

func printTenures(p printer, ts []history.Tenure, now time.Time) {
	if p.json {
		for _, t := range ts {
			p.obj(t)
		}
		return
	}
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return "?"
		}
		// The time of day alone for today's; a retention of a day or more
		// shows earlier days' too, which then need their date.
		if y, m, d := t.Local().Date(); y != now.Local().Year() || m != now.Local().Month() || d != now.Local().Day() {
			return t.Local().Format("2006-01-02 15:04:05.000")
		}
		return t.Local().Format("15:04:05.000")
	}
	tw, flush := p.table()
	defer flush()
	fmt.Fprintln(tw, "NAME\tHOLDER\tTOKEN\tFROM\tTO\tHELD\tRENEWALS\tENDED BY\tFLAGS")
	for _, t := range ts {
		to, ended, held := stamp(t.To), t.EndedBy, "?"
		if t.Live() {
			to, ended = "-", "live"
		}
		if d := t.Held(now); d > 0 {
			held = d.Round(10 * time.Millisecond).String()
		}
		if t.Reason != "" {
			ended += " (" + textSafe(t.Reason) + ")"
		}
		if !t.HeldUntil.IsZero() {
			ended += ", held until " + stamp(t.HeldUntil) // no grant allowed until then
		}
		holder := field(t.Holder)
		if t.Holder == "" {
			holder = "?"
		}
		flag := ""
		if t.Flapping {
			flag = "FLAPPING"
		}
		renewals := strconv.Itoa(t.Renewals)
		if t.Live() {
			renewals = "-" // counted when the tenure ends (0 read as none)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, holder, t.Token, stamp(t.From), to, held,
			renewals, ended, flag)
	}
}

// liveLeases lists the bucket's live leases under prefix, within --timeout
// of its own. The store is opened without batching: it only reads, and
// with batching Open would update a bucket that does not allow atomic
// publish.
func liveLeases(ctx context.Context, c *connFlags, nc *nats.Conn, bucket, prefix string) ([]kvlease.Record, error) {
	st, err := c.openStore(ctx, nc, bucket, kvlease.WithoutBatching())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return st.List(ctx, prefix)
}

// historySince is --since's start, refusing a time after now: it printed
// the live leases alone, exit 0, as if the window had held nothing (found
// by an outside client). "0s" asks for the live leases alone.
func historySince(s string, now time.Time) (time.Time, error) {
	from, _, err := history.ParseSince(s, now)
	if err != nil {
		return time.Time{}, usageError{fmt.Errorf("--%w", err)}
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil && t.After(now) {
		return time.Time{}, usageError{fmt.Errorf("--since %q: in the future (it is %s here): give a time before now, or how far back (1h; 0s for the live leases alone)",
			s, now.Format(time.RFC3339))}
	}
	return from, nil
}

// historyReadHint adds to a read of a replicated history stream that got
// nothing what status says of a stream without a quorum, the usual cause:
// it said only "nothing received for 2s" (found by an outside client).
func historyReadHint(err error, replicas int) error {
	if replicas > 1 && errors.Is(err, kvlease.ErrUnavailable) {
		return fmt.Errorf("%w (the history stream is replicated (R%d): %s)", err, replicas, noQuorum)
	}
	return err
}
