package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1 // the operation failed
	ExitUsage = 2 // bad flags or arguments
)

// CatchHangups, for a command args run that takes SIGHUP as a reload, not
// a stop (serve, which reloads its --config as nats-server does), catches
// SIGHUP from now on and reports true; serve reloads at each once it is
// ready. Called first thing: until then a SIGHUP ends the process. One the
// process was started ignoring (nohup) stays ignored. Every other command
// stops on SIGHUP (a terminal or ssh session closed) as on SIGTERM.
func CatchHangups(args []string) bool {
	cmd, _, err := newRoot(io.Discard, io.Discard).Find(args)
	if err != nil || cmd.Name() != "serve" {
		return false
	}
	if !signal.Ignored(syscall.SIGHUP) {
		hangups = make(chan os.Signal, 1)
		signal.Notify(hangups, syscall.SIGHUP)
	}
	return true
}

// SecondStopEnds says whether a second stop signal should end the
// command args run at once, the first having begun its stop: true for
// those that release a lease as they stop (acquire, run, elect,
// register), whose release is tried again while the lease would be held
// (releaseContext). An operator who will not wait so leaves the lease to
// lapse; run's guard stops the command's group all the same. serve and
// dev-cluster bound their own stops.
func SecondStopEnds(args []string) bool {
	cmd, _, err := newRoot(io.Discard, io.Discard).Find(args)
	return err == nil && slices.Contains([]string{"acquire", "run", "elect", "register"}, cmd.Name())
}

// hangups receives the SIGHUPs CatchHangups caught (nil: none are, as when
// Main runs in a test).
var hangups chan os.Signal

// Main runs the leased command line with args and returns the exit code.
// Cancelling ctx (SIGINT, SIGTERM in the binary) stops a running server.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && cmd == root { // root runs nothing: its only error is an unknown command
		err = usageError{unknownCommand(err)}
	}
	var status exitStatus
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &status): // `leased run`: the command's own status
		return int(status)
	}
	msg := api.Message(err)
	if f := cmd.Flags().Lookup("ttl"); f != nil && errors.Is(err, kvlease.ErrDurationOutOfRange) && !strings.Contains(msg, "--ttl") {
		// The grantor's policy refused it: acquire and register said
		// only "duration out of range" (found by an outside client).
		// The flag named, the service's code is left out: run said
		// "ttl_out_of_range: duration out of range", elect, which asks
		// the bucket, "duration out of range" (found by an outside client).
		msg = "--ttl: " + strings.Replace(msg, api.CodeTTLOutOfRange+": ", "", 1)
	}
	say := lineLog{w: stderr}
	if logsJSON(cmd) {
		// run, elect and register log JSON records with -o json: their
		// last line, the error, was text (found by an outside client).
		say = newLineLog(stderr, "json")
	}
	say.print(slog.LevelError, msg) // no Go package names
	if hint := noQuorumHint(msg); hint != "" {
		// Every command said only "503 … temporarily unavailable" while a
		// cluster had no quorum (found by an outside client).
		say.print(slog.LevelError, hint)
	}
	if errors.As(err, new(usageError)) {
		if cmd == root {
			fmt.Fprintln(stderr, `"leased --help" lists the commands`)
		} else if usage := fmt.Sprintf("usage: %s (%q says more)", cmd.UseLine(), cmd.CommandPath()+" --help"); say.json != nil {
			say.print(slog.LevelInfo, usage)
		} else {
			fmt.Fprintln(stderr, usage)
		}
	}
	return exitCode(err)
}

// lineLog writes the lines of run, elect and the guard that are not their
// logger's records (warnings, a command that cannot start): "leased: TEXT"
// as text, or with -o json a JSON record like the logger's, whose msg is
// TEXT without its "warning: ". They were text under -o json too, and
// broke a reader of its stderr exactly on the lost lease (found in review).
type lineLog struct {
	w    io.Writer
	json *slog.Logger // nil for text
}

func newLineLog(w io.Writer, format string) lineLog {
	if format == "json" {
		return lineLog{w: w, json: slog.New(slog.NewJSONHandler(w, nil))}
	}
	return lineLog{w: w}
}

// print writes text at level.
func (l lineLog) print(level slog.Level, text string) {
	if l.json != nil {
		l.json.Log(context.Background(), level, strings.TrimPrefix(text, "warning: "))
		return
	}
	// Errors carry strings others chose: a revocation's reason ("lease
	// lost: … was revoked: REASON") reached the terminal with its ESC and
	// BEL raw, as history once printed them.
	fmt.Fprintf(l.w, "leased: %s\n", textSafe(text))
}

// logsJSON reports whether cmd is one whose stderr is a JSON log: run,
// elect or register given -o json, or serve given --log-format json.
func logsJSON(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	if cmd.Name() == "serve" {
		// Its last line says why the node stopped (a refused data
		// directory, an unfit bucket): it was text under --log-format
		// json, the one line a JSON log pipeline could not read (found by
		// an outside client).
		f := cmd.Flags().Lookup("log-format")
		return f != nil && f.Value.String() == "json"
	}
	if !slices.Contains([]string{"run", "elect", "register"}, cmd.Name()) {
		return false
	}
	f := cmd.Flags().Lookup("output")
	return f != nil && f.Value.String() == "json"
}

type usageError struct{ error }

// failedError exits [ExitError] whatever it wraps: a refusal that says
// nothing against the command's arguments, though its code is one that
// usually does (too_large).
type failedError struct{ error }

// unknownCommand is cobra's unknown-command error on one line: its
// suggestions come on lines of their own ("…\n\nDid you mean this?\n\tacquire\n"),
// which printed as "…; ; Did you mean this?; \tacquire; ".
func unknownCommand(err error) error {
	first, rest, ok := strings.Cut(err.Error(), "\n")
	if !ok {
		return err
	}
	var suggestions []string
	for _, l := range strings.Split(rest, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "Did you mean this?" {
			suggestions = append(suggestions, l)
		}
	}
	if len(suggestions) == 0 {
		return errors.New(first)
	}
	return fmt.Errorf("%s (did you mean %s?)", first, strings.Join(suggestions, " or "))
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "leased",
		Short: "Leases that lapse on their own, on NATS JetStream",
		Long: `leased grants leases: grants of authority that lapse on their own. A lease
lives in a NATS JetStream KV bucket with a per-key TTL; its KV revision is the
fencing token. Run "leased serve" to start a grantor node.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServe(stderr), newVersion(stdout),
		newAcquire(stdout, stderr), newRenew(stdout), newRelease(stdout), newRevoke(stdout),
		newGet(stdout), newList(stdout), newWatch(stdout), newRun(stdout, stderr), newStatus(stdout),
		newDevCluster(stdout, stderr), newRegister(stdout, stderr), newDiscover(stdout), newHistory(stdout),
		newElect(stdout, stderr), newAdvise(stdout), newBench(stdout, stderr), newGuard())
	return root
}

func newLogger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usageError{fmt.Errorf("--log-format %q: want text or json", format)}
	}
}
