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

// guardEnv tells the guard that run started it, and on which descriptors
// it has the two pipes: "LIFE,REPORT". On LIFE it reads until run is gone;
// on REPORT it tells run the command's pid once it has started (nothing if
// it could not start), then its wait status once it has exited. They come
// after every descriptor run inherited without close-on-exec, which pass
// on to the command at their own numbers as they did before the guard (a
// socket-activated server's listener on 3, a shell's 3>file): the pipes
// on 3 and 4 took their place, and the command could write its own wait
// status (found in review). The command does not get guardEnv or the pipes.
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
// run's end of the life pipe closes. It stays until then, after the
// command has exited too: run reaps what the command left in its group,
// and a run killed meanwhile must not leave that running (found in review).
func guard(argv []string, stderr io.Writer) error {
	lifeFD, reportFD, ok := guardFDs(os.Getenv(guardEnv))
	if !ok { // not started by run: no pipes of run's
		return usageError{errors.New(guardCommand + " is run's own: it starts a command for run or elect")}
	}
	syscall.CloseOnExec(lifeFD)
	syscall.CloseOnExec(reportFD)
	life, report := os.NewFile(uintptr(lifeFD), "run-life"), os.NewFile(uintptr(reportFD), "run-report")
	// Signals for the guard itself are not the command's: were a
	// terminal's hang-up or interrupt to end the guard, the command would
	// be left without it. Caught, not ignored, so that the command gets
	// the dispositions run had (an ignored signal stays ignored across
	// exec, a caught one does not): those ignored (nohup) are left so.
	var sigs []os.Signal
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT} {
		if !signal.Ignored(sig) {
			sigs = append(sigs, sig)
		}
	}
	signal.Notify(make(chan os.Signal, 1), sigs...)
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
	runGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, life) // EOF: run is gone, or done
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		close(runGone)
	}()
	_ = c.Wait()
	if ws, ok := c.ProcessState.Sys().(syscall.WaitStatus); ok {
		fmt.Fprintln(report, uint32(ws))
	}
	<-runGone
	return nil
}

// guardFDs parses guardEnv's value.
func guardFDs(v string) (life, report int, ok bool) {
	a, b, found := strings.Cut(v, ",")
	life, err1 := strconv.Atoi(a)
	report, err2 := strconv.Atoi(b)
	return life, report, found && err1 == nil && err2 == nil && life > 2 && report > 2 && life != report
}

// inheritedFDs returns, as exec.Cmd.ExtraFiles, the descriptors from 3 up
// that this process has without close-on-exec (what it inherited to pass
// on: the Go runtime opens everything close-on-exec), each at its own
// number, nil (closed) between them.
func inheritedFDs() []*os.File {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var files []*os.File
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
		if errno != 0 || flags&syscall.FD_CLOEXEC != 0 {
			continue // run's own, or gone (ReadDir's own descriptor)
		}
		for len(files) < fd-2 {
			files = append(files, nil)
		}
		files[fd-3] = os.NewFile(uintptr(fd), "inherited")
	}
	return files
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
	// /proc/self/exe, not os.Executable's path: the binary may have been
	// replaced or removed since run started (an upgrade), while elect
	// waited to lead (found in review).
	cmd := exec.Command("/proc/self/exe", append([]string{guardCommand}, argv...)...)
	cmd.Args[0] = "leased"
	passed := inheritedFDs()
	lifeFD := 3 + len(passed)
	cmd.ExtraFiles = append(passed, lifeR, reportW)
	cmd.Env = append(slices.Clip(env), fmt.Sprintf("%s=%d,%d", guardEnv, lifeFD, lifeFD+1))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// A group of its own: the terminal's signals are run's to pass on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	reportW.Close()
	for _, f := range passed {
		if f != nil {
			f.Close() // the guard has them; run does not use them
		}
	}
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

// wait waits for the command's status and returns it as run reports it:
// nil for 0, an exitStatus otherwise (128+signal for one killed). A guard
// that reports none (killed itself, with the command's group, at SIGKILL
// time; or it could not start the command) is waited for, and its own
// status stands for the command's.
func (g *guarded) wait() error {
	line, _ := g.report.ReadString('\n')
	n, perr := strconv.ParseUint(strings.TrimSpace(line), 10, 32)
	if perr != nil {
		return childStatus(g.guard.Wait())
	}
	switch ws := syscall.WaitStatus(n); {
	case ws.Signaled():
		return exitStatus(128 + int(ws.Signal()))
	case ws.ExitStatus() != 0:
		return exitStatus(ws.ExitStatus())
	}
	return nil
}

// close closes run's end of the life pipe, so that the guard kills what is
// left of the command's group and exits, and waits for it.
func (g *guarded) close() {
	g.life.Close()
	_ = g.guard.Wait()
	g.closer.Close()
}
