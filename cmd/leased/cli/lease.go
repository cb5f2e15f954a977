package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
)

func newAcquire(stdout, stderr io.Writer) *cobra.Command {
	var c connFlags
	var ttl time.Duration
	var hold bool
	var attrs []string
	cmd := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Acquire a lease; with --hold, keep it renewed until interrupted",
		Long: `acquire asks the service for lease NAME and prints the grant: the fencing
token, the revision and the secret that renew and release need. A grant
that gets no answer is sent again, with the same request id and secret,
until --timeout: if the first attempt was carried out, the retry gets that
tenure ("recovered") rather than being told the lease is held.

With --hold it keeps the lease renewed (every TTL/3) until SIGINT, SIGTERM or SIGHUP,
then releases it; if the lease is lost first it exits with code 5.`,
		Args: nameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := parseAttrs("attr", attrs)
			if err != nil {
				return err
			}
			brokenPipeIsAnError()
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				p := c.printer(stdout)
				gctx, cancel := c.grantContext(ctx)
				l, err := kvlease.Acquire(gctx, cl, args[0], c.holder, ttl, kvlease.WithAttributes(a))
				cancel()
				if err != nil {
					return err
				}
				if err := p.lease(api.LeaseOf(l.Record())); err != nil {
					// Its secret and token went nowhere: no one could renew
					// or release it, and it stayed held for its TTL while
					// acquire exited 0 (acquire -o json > a full disk); with
					// --hold it was kept renewed, its token known to no one
					// that would fence a write with it.
					rctx, cancel := cleanupContext(ctx, c.timeout)
					defer cancel()
					if rerr := l.Release(rctx); rerr != nil {
						// It said "released" whatever the release's outcome.
						rerr = permissionCause(ctx, rerr)
						return fmt.Errorf("writing the grant: %w; and releasing %s failed, so it stays held until its TTL lapses: %w",
							err, args[0], rerr)
					}
					return fmt.Errorf("writing the grant: %w; released %s", err, args[0])
				}
				if !hold {
					return nil
				}
				return holdLease(ctx, l, stderr, renewOnEnd(ctx, cl, l)...)
			})
		},
	}
	c.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	cmd.Flags().DurationVar(&ttl, "ttl", defaultTTL, ttlUsage)
	cmd.Flags().BoolVar(&hold, "hold", false, "keep the lease renewed until interrupted, then release it")
	cmd.Flags().StringArrayVar(&attrs, "attr", nil, "attribute key=value (repeatable)")
	return cmd
}

// brokenPipeIsAnError makes a write to a pipe whose reader is gone fail
// with EPIPE rather than kill the process by SIGPIPE (Go's default for
// stdout and stderr), for acquire and renew, whose output is the only copy
// of a lease's proof of tenure: a failed write is handled as any other
// (acquire gives the lease back), where `acquire -o json | (exit 0)` died
// with the lease held for its TTL.
func brokenPipeIsAnError() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }

// lossReleaseWait is how long acquire --hold and register wait for the
// release they send after losing their lease at the deadline, before they
// report the loss.
const lossReleaseWait = 100 * time.Millisecond

// releaseAfterLoss sends the release [kvlease.Keeper.Close] makes after k's
// loss: it frees a revoked lease's hold, or the tenure a paused server's
// late renewal brings back. After a refusal or revocation it waits for it
// (the grantor answers); after a loss at the deadline with no renewal
// answered only lossReleaseWait, since the release has no better chance
// of an answer: waiting out its attempt (2 s) reported the loss, and
// exited 5, that long after the holder's deadline, all of a 20 s lease's
// holder margin (found by an outside client).
func releaseAfterLoss(ctx context.Context, k *kvlease.Keeper) {
	rctx, cancel := cleanupContext(ctx, 5*time.Second)
	released := make(chan struct{})
	go func() {
		defer cancel()
		defer close(released)
		_ = k.Close(rctx) // nil after a loss, whatever its outcome
	}()
	var wait <-chan time.Time // nil: until it is done
	if deadlineLoss(k.Err()) {
		wait = time.After(lossReleaseWait)
	}
	select {
	case <-released:
	case <-wait:
	}
}

// deadlineLoss says whether a keeper's end is its holder's deadline passing
// with no renewal answered, as opposed to a refusal or a revocation, after
// which the grantor answers and a release frees the lease at once.
func deadlineLoss(err error) bool {
	var exp *kvlease.LeaseExpiredError
	return errors.As(err, &exp) && exp.Refused == nil && !exp.Released
}

func holdLease(ctx context.Context, l *kvlease.Lease, stderr io.Writer, opts ...kvlease.KeeperOption) error {
	k, err := kvlease.Keep(context.WithoutCancel(ctx), l, opts...)
	if err != nil {
		return err
	}
	if lost := keepUntilStop(ctx, k); lost != nil {
		return lost
	}
	lost, err := releaseAfterStop(ctx, k, func(left time.Duration) {
		fmt.Fprintf(stderr, "leased: releasing %s: no answer yet; trying again for up to %v (stop again to stop waiting: it lapses on its own)\n", l.Name(), left)
	})
	if lost != nil {
		return lost
	}
	if err != nil {
		// Refused, it was not sent: the lease is held until its TTL
		// lapses, which the refusal alone did not say (found by an
		// outside client, a user who may not release).
		if err := permissionCause(ctx, err); errors.Is(err, ErrPermissionDenied) {
			// A refusal that stopped the hold first (a renewal denied)
			// is said as such: it was said as the release's (found by an
			// outside client, a user who may neither renew nor release).
			if stopped := permissionCause(ctx, nil); stopped != nil && stopped.Error() != err.Error() {
				return fmt.Errorf("%w; release: %w; so %s stays held until its TTL lapses", stopped, err, l.Name())
			}
			return fmt.Errorf("release: %w; so %s stays held until its TTL lapses", err, l.Name())
		}
		return fmt.Errorf("release: %w", err)
	}
	fmt.Fprintln(stderr, "leased: released", l.Name())
	return nil
}

// releaseNotice is releaseContext's notice for a command that logs.
func releaseNotice(log *slog.Logger) func(left time.Duration) {
	return func(left time.Duration) {
		log.Warn("release unanswered; trying again while the lease would be held (stop again to stop waiting: it lapses on its own)", "for", left)
	}
}

// releaseAfterStop releases k's lease after a stop that keepUntilStop
// found it held at, and returns the release's error; or, if the lease was
// lost meanwhile, the loss (errLost). Close lets a renewal in flight as
// the stop came finish, and that renewal may find the lease revoked:
// Close then sends a best-effort release and returns nil, the loss only
// in k.Err(), and acquire --hold and register said "released", exit 0
// (found in review).
func releaseAfterStop(ctx context.Context, k *kvlease.Keeper, notice func(left time.Duration)) (lost, err error) {
	rctx, cancel := releaseContext(ctx, k.Lease(), 5*time.Second, notice)
	defer cancel()
	err = k.Close(rctx)
	if end := k.Err(); end != nil && !errors.Is(end, kvlease.ErrClosed) {
		return fmt.Errorf("%w: %s: %w", errLost, k.Lease().Name(), end), nil
	}
	if cause := context.Cause(rctx); err != nil && errors.Is(cause, ErrPermissionDenied) {
		err = cause // the release's own refusal, which ended its wait
	}
	return nil, err
}

// keepUntilStop waits until ctx ends (a stop: the caller releases) or k's
// lease is lost, and returns the loss (errLost), its release sent. A stop
// that finds the lease gone is a loss too: one that comes as the deadline
// passes, or to a process resumed from SIGSTOP past its deadline with
// SIGTERM pending, was taken for a stop half of the time, and acquire
// --hold and register said "released", exit 0, with no word of the loss
// (found by an outside client).
func keepUntilStop(ctx context.Context, k *kvlease.Keeper) (lost error) {
	l := k.Lease()
	select {
	case <-ctx.Done():
		err := l.Check() // a loss while the holder worked is counted (leased.expiries_during_work)
		if err == nil {
			return nil
		}
		lost = fmt.Errorf("%w: %s: %w", errLost, l.Name(), err)
	case <-k.Done():
		_ = l.Check() // counted, as above
		lost = fmt.Errorf("%w: %s: %w", errLost, l.Name(), k.Err())
	}
	// Revoked (or lapsed). A revocation holds the lease until this
	// holder's deadline; nothing runs under it here, so the release Close
	// sends frees it for the next holder at once.
	releaseAfterLoss(ctx, k)
	return lost
}

func newRenew(stdout io.Writer) *cobra.Command {
	var c connFlags
	var h holderFlags
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "renew NAME (--lease-file F | --holder H --token N --revision R --secret S)",
		Short: "Renew a lease once (prints the renewed lease, with its new revision and its secret: the next --lease-file)",
		Args:  nameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			// 0 is --ttl left out (the tenure's own duration): one given
			// renewed with the old duration, exit 0, where acquire, run,
			// elect and the API refuse it.
			if cmd.Flags().Changed("ttl") && ttl <= 0 {
				return usageError{fmt.Errorf("--ttl %v: want a positive duration (leave --ttl out to keep the tenure's)", ttl)}
			}
			if err := h.resolve(cmd, args[0], &c, cmd.InOrStdin(), stdout); err != nil {
				return err
			}
			brokenPipeIsAnError()
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				rec, err := cl.Renew(ctx, kvlease.RenewRequest{Name: args[0], Holder: c.holder,
					Token: kvlease.Token(h.token), Revision: h.revision, Secret: h.secret, Duration: ttl})
				if err != nil {
					return h.behind(err)
				}
				// The secret is passed through, so that the output can serve as
				// the next --lease-file.
				out := api.LeaseOf(rec)
				out.Secret = h.secret
				if err := c.printer(stdout).lease(out); err != nil {
					// It exited 0, and a script's "renew -o json > new &&
					// mv new lease.json" took the empty file for the next.
					return fmt.Errorf("renewed %s to revision %d, but writing it failed: %w; the lease file given is behind: "+
						"renew or release with it and --revision %d", args[0], rec.Revision, err, rec.Revision)
				}
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	h.register(cmd)
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "new duration (default: the tenure's)")
	return cmd
}

func newRelease(stdout io.Writer) *cobra.Command {
	var c connFlags
	var h holderFlags
	cmd := &cobra.Command{
		Use:   "release NAME (--lease-file F | --holder H --token N --revision R --secret S)",
		Short: "Release a lease",
		Args:  nameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := h.resolve(cmd, args[0], &c, cmd.InOrStdin(), stdout); err != nil {
				return err
			}
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				err := cl.Release(ctx, kvlease.ReleaseRequest{Name: args[0], Holder: c.holder,
					Token: kvlease.Token(h.token), Revision: h.revision, Secret: h.secret})
				if err != nil {
					return h.behind(err)
				}
				c.printer(stdout).line("released %s", args[0])
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	c.registerHolder(cmd.Flags())
	h.register(cmd)
	return cmd
}

// holderFlags identify a tenure for renew and release: from --lease-file
// (what `acquire -o json` printed), or from flags.
type holderFlags struct {
	leaseFile       string
	token, revision uint64
	secret          string
	// revisionGiven: --revision overrode --lease-file's revision.
	revisionGiven bool
}

func (h *holderFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	if f := fs.Lookup("holder"); f != nil {
		// The tenure's holder, not a default of this process's.
		f.Usage = "holder of the tenure, as the grant named it (required without --lease-file)"
	}
	fs.StringVar(&h.leaseFile, "lease-file", "", `file holding what "leased acquire -o json" (or "leased renew -o json") printed, - for stdin: supplies holder, token, revision and secret; --revision overrides its revision`)
	fs.Uint64Var(&h.token, "token", 0, "fencing token from the grant")
	fs.Uint64Var(&h.revision, "revision", 0, "current revision (from the grant or the last renewal)")
	fs.StringVar(&h.secret, "secret", "", "secret from the grant (env LEASED_SECRET; prefer --lease-file: arguments show in ps)")
}

// resolve fills the tenure from --lease-file, and checks that it is complete.
// With --lease-file, an explicit --revision overrides the file's (the
// revision a conflict reply named, when the answer to a renewal was lost);
// --holder, --token and --secret would contradict the file: refused.
// stdout is where the command's output goes, to name a lease file that
// the shell emptied for it.
func (h *holderFlags) resolve(cmd *cobra.Command, name string, c *connFlags, stdin io.Reader, stdout io.Writer) error {
	// No tenure has token or revision 0: one given (a script's empty
	// variable, $(jq …) of the wrong field) was taken for one left out, and
	// renew said the lease file "has no revision", or that --token was
	// required when it had been given (found trying it).
	for _, f := range []struct {
		flag string
		v    uint64
	}{{"token", h.token}, {"revision", h.revision}} {
		if f.v == 0 && cmd.Flags().Changed(f.flag) {
			return usageError{fmt.Errorf("--%s 0: %ss start at 1 (give the grant's, or the last renewal's)", f.flag, f.flag)}
		}
	}
	if h.leaseFile != "" {
		for _, f := range []string{"holder", "token", "secret"} {
			if cmd.Flags().Changed(f) {
				return usageError{fmt.Errorf("--%s and --lease-file do not go together: the file names the tenure (--revision may override its revision)", f)}
			}
		}
		revision, explicit := h.revision, cmd.Flags().Changed("revision")
		r := stdin
		var file *os.File
		if h.leaseFile != "-" {
			f, err := os.Open(h.leaseFile)
			if err != nil {
				return usageError{fmt.Errorf("--lease-file: %w", err)}
			}
			defer f.Close()
			r, file = f, f
		}
		l, err := readLeaseFile(r, name)
		if errors.Is(err, errEmptyLeaseFile) && file != nil && sameFile(file, stdout) {
			// "renew --lease-file lease.json -o json > lease.json": the
			// shell empties the file before renew reads it, and renew
			// said only "unexpected end of JSON input" (found trying it).
			return usageError{fmt.Errorf("--lease-file %s is empty, and is also where this command's output goes: the shell emptied it "+
				"(> %s) before %s read it; if it was the only copy of the lease's secret, %s stays held until its TTL lapses. "+
				"Write the output to another file, then mv it", h.leaseFile, h.leaseFile, cmd.Name(), name)}
		}
		if err != nil {
			return usageError{err}
		}
		c.holder, h.token, h.revision, h.secret = l.Holder, l.Token, l.Revision, l.Secret
		if explicit {
			h.revision, h.revisionGiven = revision, true
		}
	}
	if h.secret == "" {
		h.secret = os.Getenv("LEASED_SECRET") // read here, so that --help cannot print it
	}
	if c.holder == "" || h.token == 0 || h.revision == 0 || h.secret == "" {
		if h.leaseFile != "" {
			// It said "--lease-file, or --holder, … are required" of a
			// file given: one "get -o json" wrote, which has no secret.
			var missing []string
			for _, m := range []struct {
				field string
				none  bool
			}{{"holder", c.holder == ""}, {"token", h.token == 0}, {"revision", h.revision == 0}, {"secret", h.secret == ""}} {
				if m.none {
					missing = append(missing, m.field)
				}
			}
			return usageError{fmt.Errorf("--lease-file %s has no %s: give what \"leased acquire -o json\" (or \"leased renew -o json\") printed; \"get\" and \"ls\" print no secret",
				h.leaseFile, strings.Join(missing, ", "))}
		}
		return usageError{errors.New("--lease-file, or --holder, --token, --revision and --secret, are required")}
	}
	return nil
}

// behind adds to a stale revision refusal of a tenure named by
// --lease-file what to do: the file is behind its tenure, which is not
// lost. It said only "not the holder: stale revision", exit 6, of a lease
// still held (a renew whose answer was lost, timed out, had been carried
// out; found trying it).
func (h *holderFlags) behind(err error) error {
	var stale *kvlease.StaleRevisionError
	if h.leaseFile == "" || !errors.As(err, &stale) {
		return err
	}
	if h.revisionGiven {
		// The file's revision was not the one sent: it blamed the file
		// for the --revision typed beside it (found trying it).
		return fmt.Errorf("%w; --revision %d is behind its tenure (it overrides --lease-file %s's): give --revision %d",
			err, h.revision, h.leaseFile, stale.Revision)
	}
	return fmt.Errorf("%w; --lease-file %s is behind its tenure, which a later renewal took to revision %d "+
		"(one whose answer was lost, or whose output is another file): give --revision %d", err, h.leaseFile, stale.Revision, stale.Revision)
}

// maxLeaseFile bounds what --lease-file reads. What "acquire -o json"
// prints is a few hundred bytes plus the attributes, which the service
// bounds far lower (grantor.Config.MaxAttributeBytes, 1 KiB by default).
const maxLeaseFile = 1 << 20

// errEmptyLeaseFile is readLeaseFile's error for a file with nothing in it.
var errEmptyLeaseFile = errors.New(`--lease-file: empty, not what "leased acquire -o json" prints`)

// sameFile says whether f is the file w writes to.
func sameFile(f *os.File, w io.Writer) bool {
	out, ok := w.(*os.File)
	if !ok {
		return false
	}
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := out.Stat()
	return err == nil && os.SameFile(a, b)
}

// readLeaseFile reads what "leased acquire -o json" (or "renew -o json")
// printed, for lease name: at most maxLeaseFile bytes of one JSON lease.
func readLeaseFile(r io.Reader, name string) (api.Lease, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxLeaseFile+1))
	if err != nil {
		return api.Lease{}, fmt.Errorf("--lease-file: %w", err)
	}
	if len(b) > maxLeaseFile {
		return api.Lease{}, fmt.Errorf("--lease-file: more than %d bytes: not what \"leased acquire -o json\" prints", maxLeaseFile)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return api.Lease{}, errEmptyLeaseFile
	}
	var l api.Lease
	if err := json.Unmarshal(b, &l); err != nil {
		return api.Lease{}, fmt.Errorf("--lease-file: not what \"leased acquire -o json\" prints: %w", err)
	}
	if l.Name != name {
		return api.Lease{}, fmt.Errorf("--lease-file is for lease %q, not %q", l.Name, name)
	}
	return l, nil
}

func newRevoke(stdout io.Writer) *cobra.Command {
	var c connFlags
	var reason string
	var now bool
	var token uint64
	cmd := &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke a lease regardless of its holder (operators)",
		Long: `Revoke a lease regardless of its holder (operators).

The lease stays held, no grant allowed, until the revoked holder's deadline
has passed (the lease's TTL plus the grantor's margin from now), unless that
holder releases it first: one that is paused or cut off does not hear of
the revocation and still counts the lease as held until then. --now frees
it at once; use it only when the holder is known to be gone, or the
resource checks tokens. --token revokes only the tenure of that token (as
get shows it): if the lease has changed hands since, nothing is revoked
(exit 4).`,
		Args: nameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == 0 && cmd.Flags().Changed("token") {
				// No tenure has token 0, and 0 is the API's "whatever
				// tenure holds it": a script whose token came out empty
				// revoked the next holder (found trying it).
				return usageError{errors.New("--token 0: tokens start at 1; leave --token out to revoke whatever tenure holds the lease")}
			}
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				var opts []kvlease.RevokeOption
				if now {
					opts = append(opts, kvlease.FreeNow())
				}
				if token != 0 {
					opts = append(opts, kvlease.OnlyTenure(kvlease.Token(token)))
				}
				l, err := cl.Revoke(ctx, args[0], reason, opts...)
				if err != nil {
					return err
				}
				switch {
				case now:
					c.printer(stdout).line("revoked %s (holder %s, token %d); it is free now", l.Name, l.Holder, l.Token)
				case l.HeldBackMS == 0:
					// A grantor older than held_back_ms in this reply: one
					// built before 2026-12-05 frees the lease at once, one
					// built since holds it without saying so.
					c.printer(stdout).line("revoked %s (holder %s, token %d); this grantor did not say whether it holds the lease until that holder's deadline "+
						"(a leased built before 2026-12-05 frees it at once): `leased acquire` is refused `held` while it does",
						l.Name, l.Holder, l.Token)
				default:
					c.printer(stdout).line("revoked %s (holder %s, token %d); held until that holder's deadline has passed, or it releases",
						l.Name, l.Holder, l.Token)
				}
				if c.output == "json" {
					c.printer(stdout).obj(l)
				}
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	cmd.Flags().StringVar(&reason, "reason", "", "reason, recorded with the revocation")
	cmd.Flags().BoolVar(&now, "now", false, "free the lease at once, before the revoked holder's deadline (only for a holder known to be gone, or a fenced resource)")
	cmd.Flags().Uint64Var(&token, "token", 0, "revoke only the tenure of this token: nothing if another holds the lease by now (default: whatever tenure holds it)")
	return cmd
}

func newGet(stdout io.Writer) *cobra.Command {
	var c connFlags
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a live lease (exit code 4 if there is none)",
		Args:  nameArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				l, err := cl.Get(ctx, args[0])
				if err != nil {
					return err
				}
				c.printer(stdout).lease(l)
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	return cmd
}

func newList(stdout io.Writer) *cobra.Command {
	var c connFlags
	cmd := &cobra.Command{
		Use:     "ls [PREFIX]",
		Aliases: []string{"list"},
		Short:   "List live leases, optionally those whose names start with PREFIX",
		Args:    rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			if err := kvlease.ValidatePrefix(prefix); err != nil {
				return err
			}
			if err := grantorsOwn("PREFIX", prefix); err != nil {
				return err
			}
			return withClient(cmd, &c, func(ctx context.Context, cl *client.Client) error {
				ls, err := cl.List(ctx, prefix)
				if err != nil {
					return err
				}
				c.printer(stdout).leases(ls)
				return nil
			})
		},
	}
	c.register(cmd.Flags())
	return cmd
}

// grantorsOwn refuses a prefix (flag or argument what) within the
// grantor's own names, which ls, watch, history and bench leave out (the
// observer records no tenure of theirs): ls and history printed
// nothing, and watch nothing for good, with no word why (found by an
// outside client).
func grantorsOwn(what, prefix string) error {
	if kvlease.Reserved(prefix) {
		return usageError{fmt.Errorf("%s %q: names beginning %q are the grantor's own, which this leaves out (leased get shows one)",
			what, prefix, grantor.ReservedPrefix)}
	}
	return nil
}

func newWatch(stdout io.Writer) *cobra.Command {
	var c connFlags
	var bucket string
	var updatesOnly bool
	cmd := &cobra.Command{
		Use:   "watch [PREFIX]",
		Short: "Stream lease events (granted, renewed, released, revoked, expired) as they happen",
		Long: `watch prints the current leases, then every change as the server stores it,
until interrupted. It reads the lease bucket's stream directly (it needs
JetStream access to the bucket), so it sees expiries by TTL as they happen.
When the connection drops it says so on stderr and reconnects, and goes on
after the last change it printed; so too when it loses its consumer on the
server with the connection up (the consumer's node died, say). Either way
what was stored meanwhile comes as each lease's latest change.`,
		Args: rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			// Before connecting: checked by Open and Watch, a bad PREFIX
			// or --bucket said "grantor unavailable", exit 1, with no
			// server (found by an outside client), as history did.
			if err := kvlease.ValidatePrefix(prefix); err != nil {
				return usageError{err}
			}
			if err := grantorsOwn("PREFIX", prefix); err != nil {
				return err
			}
			if err := kvlease.ValidateBucket(bucket); err != nil {
				return usageError{fmt.Errorf("--bucket: %w", err)}
			}
			return withConn(cmd, &c, func(ctx context.Context, nc *nats.Conn) error {
				// It only reads: no batching, for which Open would update a
				// bucket that does not allow atomic publish.
				st, err := c.openStore(ctx, nc, bucket, kvlease.WithoutBatching())
				if err != nil {
					return err
				}
				// Say why nothing comes while the server is away (the
				// watch goes on once it is back: nothing is lost).
				stderr := cmd.ErrOrStderr()
				nc.SetDisconnectErrHandler(func(nc *nats.Conn, err error) {
					if err == nil || nc.IsClosed() {
						return // our own Close, at the end
					}
					// Said as it is: the bucket keeps one entry a lease, so
					// the catch-up gives each lease's latest change, and a
					// tenure that began and ended meanwhile is only in the
					// history. It promised "the changes made meanwhile"
					// (found by an outside client).
					fmt.Fprintf(stderr, "leased: watch: %s: connection to the server lost; reconnecting (then each lease's latest change "+
						"follows; a tenure begun and ended meanwhile is only in leased history)\n", time.Now().UTC().Format(time.RFC3339Nano))
				})
				prev := nc.ReconnectHandler() // withConn's, which forgives a refusal recovered from
				nc.SetReconnectHandler(func(nc *nats.Conn) {
					if prev != nil {
						prev(nc)
					}
					fmt.Fprintf(stderr, "leased: watch: %s: reconnected to %s\n", time.Now().UTC().Format(time.RFC3339Nano), redact.URL(nc.ConnectedUrl()))
				})
				var opts []kvlease.WatchOption
				if updatesOnly {
					opts = append(opts, kvlease.UpdatesOnly())
				}
				w, err := st.Watch(ctx, prefix, opts...)
				if err != nil {
					return err
				}
				defer w.Stop()
				// The consumer lost with the connection up (its node died,
				// heartbeats missed, deleted) leaves the same gap as a
				// reconnect, and it said nothing of it (found by an outside
				// client: a consumer node SIGKILLed, a connection
				// blackholed for 2 s). A lost connection interrupts the
				// watch as it is lost, and is said above: an interrupt is
				// the connection's while it is not back. Counting
				// disconnects to match with interrupts, a disconnect that
				// found the watch already interrupted (heartbeats missed,
				// then pings) left a count that swallowed the next loss of
				// the consumer (found in review).
				stopped := make(chan struct{})
				defer close(stopped)
				go func() {
					for {
						select {
						case <-w.Interrupts():
						case <-stopped:
							return
						}
						if nc.Status() != nats.CONNECTED {
							continue // said as the connection was lost
						}
						fmt.Fprintf(stderr, "leased: watch: %s: lost its consumer on the server (its node down, its heartbeats missed, or deleted); making another "+
							"(then each lease's latest change follows; a tenure begun and ended meanwhile is only in leased history)\n",
							time.Now().UTC().Format(time.RFC3339Nano))
					}
				}()
				p := c.printer(stdout)
				for ev := range w.Events() {
					if strings.HasPrefix(ev.Name, grantor.ReservedPrefix) {
						continue // the grantor's own (its observer), which ls leaves out too
					}
					printEvent(p, ev)
				}
				if ctx.Err() != nil {
					return nil
				}
				return w.Err()
			})
		},
	}
	c.register(cmd.Flags())
	cmd.Flags().StringVar(&bucket, "bucket", kvlease.DefaultBucket, "lease bucket name")
	cmd.Flags().BoolVar(&updatesOnly, "updates-only", false, "skip the current leases; only changes from now on")
	return cmd
}

// Event is a watch event as `leased watch -o json` prints it.
type Event struct {
	Type     string    `json:"type"`
	Name     string    `json:"name"`
	Holder   string    `json:"holder,omitempty"`
	Token    uint64    `json:"token,omitempty"`
	Revision uint64    `json:"revision"`
	Time     time.Time `json:"time"`
	Reason   string    `json:"reason,omitempty"`
	Replay   bool      `json:"replay,omitempty"`
}

func printEvent(p printer, ev kvlease.Event) {
	out := Event{Type: ev.Type.String(), Name: ev.Name, Holder: ev.Holder, Token: uint64(ev.Token),
		Revision: ev.Revision, Time: ev.Time, Reason: ev.Reason, Replay: ev.Replay}
	if p.json {
		p.obj(out)
		return
	}
	reason := ""
	if out.Reason != "" {
		reason = " reason=" + fmt.Sprintf("%q", out.Reason)
	}
	fmt.Fprintf(p.w, "%s %-8s %s holder=%s token=%d revision=%d%s\n",
		out.Time.Format(time.RFC3339Nano), out.Type, out.Name, field(out.Holder), out.Token, out.Revision, reason)
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// nameArg is exactArgs(1) for a command whose argument is a lease name:
// one no lease can have is a usage error before anything is sent.
func nameArg(cmd *cobra.Command, args []string) error {
	if err := exactArgs(1)(cmd, args); err != nil {
		return err
	}
	return kvlease.ValidateName(args[0])
}

func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.RangeArgs(lo, hi)(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
