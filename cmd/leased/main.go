package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/leased/leased/cmd/leased/cli"
)

func main() {
	ctx, stop := stopContext(!cli.CatchHangups(os.Args[1:]))
	if cli.SecondStopEnds(os.Args[1:]) {
		// From the first stop on, a stop signal has its default action.
		context.AfterFunc(ctx, stop)
	}
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// stopContext is cancelled by SIGINT, SIGTERM or (if hangup) SIGHUP: a command stops
// as it does when done (run and elect stop their command, then release).
// SIGHUP (a terminal or ssh session closed) killed run outright: its
// command got SIGKILL with no SIGTERM nor grace, and the lease stayed held
// for its TTL (found in review). SIGHUP or SIGINT the process was started
// ignoring stays ignored (nohup; a background job of a shell without job
// control ignores SIGINT), and so for run's command, which inherits it;
// Go's runtime takes SIGTERM whatever its disposition was.
func stopContext(hangup bool) (context.Context, context.CancelFunc) {
	var sigs []os.Signal
	for _, sig := range []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP} {
		if !signal.Ignored(sig) && (sig != syscall.SIGHUP || hangup) {
			sigs = append(sigs, sig)
		}
	}
	if len(sigs) == 0 { // NotifyContext with none would take every signal
		return context.WithCancel(context.Background())
	}
	return signal.NotifyContext(context.Background(), sigs...)
}
