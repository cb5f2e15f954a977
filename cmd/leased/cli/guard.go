package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// guardCommand is the hidden command (`leased __guard ARGV...`) through
// which run and elect start a command: a process of the leased binary
// between run and the command, which kills the command's whole process
// group when run dies, however it dies.
//
// The kernel's parent-death signal (Pdeathsig) reaches only a direct
// child: with run SIGKILLed (or OOM-killed), the shell or launcher that
// was the command died, and what it had started kept running, re-parented
// to init, while another holder took the lease; under elect, two leaders'
// commands ran at once, for good (found by an outside client, 3 of 3
// times). The guard holds the read end of a pipe whose write end only run
// has: when run dies the kernel closes that end, the guard reads EOF, and
// SIGKILLs the command's group.
const guardCommand = "__guard"

// The guard's descriptors beside stdin, stdout and stderr (exec.Cmd's
// ExtraFiles): the pipe it watches for run's death, and the one it reports
// to run on: the command's pid once it has started (nothing if it could
// not start), then its wait status once it has exited.
const (
	guardLifeFD   = 3
	guardReportFD = 4
)

// guardEnv, set to guardCommand, tells the guard that run started it (and
// so gave it those descriptors); the command does not get it.
const guardEnv = "LEASED_GUARD"

func newGuard() *cobra.Command {
	return &cobra.Command{
		Use:                guardCommand + " ARGV...",
		Hidden:             true,
		DisableFlagParsing: true,
		Args:               cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return guard(args, cmd.ErrOrStderr())
		},
	}
}

// guard runs argv as run's command: in a process group of its own, with
// the guard's environment and standard streams, killed with its group when
// run's end of the life pipe closes.
func guard(argv []string, stderr io.Writer) error {
	if os.Getenv(guardEnv) != guardCommand {
		// Not started by run: descriptors 3 and 4 are someone else's.
		return usageError{errors.New(guardCommand + " is run's own: it starts a command for run or elect")}
	}
	life, report := os.NewFile(guardLifeFD, "run-life"), os.NewFile(guardReportFD, "run-report")
	// Signals for the guard itself are not the command's: were a
	// terminal's hang-up or interrupt to end the guard, the command would
	// be left without it. Caught, not ignored, so that the command gets the
	// default dispositions (an ignored signal stays ignored across exec).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT, syscall.SIGPIPE)
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	c.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, guardEnv+"=") })
	// Killed if the guard itself is (Pdeathsig follows the thread that
	// started it: keep that thread).
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	if err := c.Start(); err != nil {
		fmt.Fprintf(stderr, "leased: start %s: %v\n", argv[0], err)
		return exitStatus(127) // as shells do for a command that cannot run
	}
	pgid := c.Process.Pid
	fmt.Fprintln(report, pgid)
	go func() {
		_, _ = io.Copy(io.Discard, life) // EOF: run is gone
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	_ = c.Wait()
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok {
		fmt.Fprintln(report, uint32(ws))
	}
	return nil
}

// guarded is a command started through the guard.
type guarded struct {
	guard  *exec.Cmd
	pid    int           // the command's, which leads its process group
	life   *os.File      // run's end of the life pipe: closed when run dies
	report *bufio.Reader // the guard's reports
	closer io.Closer
}

// startGuarded starts argv through the guard with env and standard
// streams. ok is false if the guard could not start the command (it said
// why, on stderr); g.wait gives its status (127) then.
func startGuarded(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (g *guarded, ok bool, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, false, fmt.Errorf("find the leased binary to start the command through: %w", err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, false, err
	}
	defer lifeR.Close()
	reportR, reportW, err := os.Pipe()
	if err != nil {
		lifeW.Close()
		return nil, false, err
	}
	cmd := exec.Command(exe, append([]string{guardCommand}, argv...)...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = append(slices.Clip(env), guardEnv+"="+guardCommand), stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{lifeR, reportW} // guardLifeFD, guardReportFD
	// A group of its own: the terminal's signals are run's to pass on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	reportW.Close()
	if err != nil {
		lifeW.Close()
		reportR.Close()
		return nil, false, err
	}
	g = &guarded{guard: cmd, life: lifeW, report: bufio.NewReader(reportR), closer: reportR}
	line, _ := g.report.ReadString('\n')
	if g.pid, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		return g, false, nil
	}
	return g, true, nil
}

// wait waits for the guard and returns the command's status as run
// reports it: nil for 0, an exitStatus otherwise (128+signal for one
// killed). A guard killed itself (with the command's group, at SIGKILL
// time) reports nothing: its own status stands for the command's.
func (g *guarded) wait() error {
	err := g.guard.Wait()
	line, _ := g.report.ReadString('\n')
	g.closer.Close()
	n, perr := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if perr != nil {
		return childStatus(err)
	}
	switch ws := syscall.WaitStatus(n); {
	case ws.Signaled():
		return exitStatus(128 + int(ws.Signal()))
	case ws.ExitStatus() != 0:
		return exitStatus(ws.ExitStatus())
	}
	return nil
}

// close closes run's end of the life pipe: the guard, if still running,
// kills what is left of the command's group.
func (g *guarded) close() { g.life.Close() }
