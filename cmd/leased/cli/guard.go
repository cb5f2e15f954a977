package cli

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
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
// it has the two pipes, and run's -o: "LIFE,REPORT,FORMAT". On LIFE it reads the command's
// deadlines (see commandDeadline), one a line, until run is gone;
// on REPORT it tells run the command's pid once it has started (nothing if
// it could not start), then its wait status once it has exited, and 1 if
// it saw that exit at or past the deadline, else 0 ("STATUS LATE"). They come
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
//
// It also kills the group at the command's deadline, unless run has sent
// a later one (it sends one with each renewal). run stops the command
// itself when the lease is lost, SIGTERM then SIGKILL at that deadline;
// but a run stopped (SIGSTOP, a terminal's Ctrl-Z) or frozen renews
// nothing and stops nothing, and its command ran on past the lease while
// another holder took it. The guard, another process, does not stop with
// run, and kills at the deadline run would have.
func guard(argv []string, stderr io.Writer) error {
	lifeFD, reportFD, format, ok := guardFDs(os.Getenv(guardEnv))
	if !ok { // not started by run: no pipes of run's
		return usageError{errors.New(guardCommand + " is run's own: it starts a command for run or elect")}
	}
	say := newLineLog(stderr, format)
	syscall.CloseOnExec(lifeFD)
	syscall.CloseOnExec(reportFD)
	life, report := os.NewFile(uintptr(lifeFD), "run-life"), os.NewFile(uintptr(reportFD), "run-report")
	fromRun := bufio.NewReader(life)
	deadline, err := readDeadline(fromRun)
	if err != nil {
		return nil // run is gone (or not run): nothing to start the command for
	}
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
	// What the command starts and leaves behind (its parent gone) comes
	// to the guard, not to init: with it, what left the command's group
	// (setsid; GNU timeout makes a group of its own) is still found and
	// killed with the rest (killAll).
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		say.print(slog.LevelWarn, fmt.Sprintf("warning: cannot adopt what the command leaves (PR_SET_CHILD_SUBREAPER: %v): "+
			"processes that leave its group may outlive the lease", err))
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/task/%d/children", os.Getpid(), os.Getpid())); err != nil {
		say.print(slog.LevelWarn, "warning: this kernel lists no children in /proc (CONFIG_PROC_CHILDREN): "+
			"processes that leave the command's group may outlive the lease")
	}
	if bootClock() >= deadline {
		// run was held up past the deadline between taking the lease and
		// starting the guard: the lease is not the command's to run under.
		quietTTOU()
		say.print(slog.LevelWarn, fmt.Sprintf("the lease's deadline passed before %s could start; not started", argv[0]))
		return exitStatus(ExitLost)
	}
	err = c.Start()
	// Set after the start, which the command would inherit it from: the
	// guard, in a background group, writes to a terminal that may stop
	// such writers (stty tostop), and stopped it kept nothing to its
	// deadline and run waited on it for good (found in review).
	quietTTOU()
	if err != nil {
		say.print(slog.LevelError, fmt.Sprintf("start %s: %v", argv[0], err))
		return exitStatus(startFailure(err))
	}
	pgid := c.Process.Pid
	fmt.Fprintln(report, pgid)
	runGroup, _ := syscall.Getpgid(os.Getppid())
	// Orphans the guard adopted are reaped as they exit.
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	go func() {
		for range chld {
			reapAdopted(pgid)
		}
	}()
	exited := make(chan struct{})
	var current atomic.Int64 // the deadline, for the exit's report
	current.Store(deadline)
	go func() {
		// Waited for with stops, not c.Wait: a command stopped at the
		// terminal run gave it stops run's job too (stopJob).
		for {
			ws, err := waitCommand(pgid)
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if err == nil && ws.Stopped() {
				if sig := ws.StopSignal(); sig == syscall.SIGTSTP || sig == syscall.SIGSTOP {
					stopJob(pgid, runGroup) // not SIGTTIN: a read before it had the terminal
				}
				continue
			}
			if err == nil {
				// Late if seen at or past the deadline: run, which reads
				// this when it can, took the time itself, and a run held
				// up after an exit in time took it for late (found in
				// review).
				late := 0
				if bootClock() >= current.Load() {
					late = 1
				}
				fmt.Fprintln(report, uint32(ws), late)
			}
			break
		}
		close(exited)
	}()
	deadlines := make(chan int64)
	var runStops atomic.Bool // run is stopping the command itself
	go func() {
		for {
			d, err := readDeadline(fromRun)
			switch {
			case err != nil: // EOF: run is gone, or done
				close(deadlines)
				return
			case d == stopping:
				runStops.Store(true)
			default:
				deadlines <- d
			}
		}
	}()
	killed := false
	for {
		var t *time.Timer
		var check <-chan time.Time // none once the group is killed
		if !killed {
			left := time.Duration(deadline - bootClock())
			if left <= 0 {
				killed = true
				tell := false
				select {
				case <-exited: // run had stopped it; nothing to say
				default:
					tell = !runStops.Load() // else run kills it now too
				}
				killAll(pgid)
				if tell {
					say.print(slog.LevelWarn, fmt.Sprintf("the command's deadline passed with no renewal (leased run or elect stopped, or frozen?); "+
						"killed its process group %d", pgid))
				}
				continue
			}
			// Looked at again at least every second: Go's timers stop
			// while the machine is suspended, the boot clock does not.
			t = time.NewTimer(min(left, time.Second))
			check = t.C
		}
		select {
		case d, ok := <-deadlines:
			if !ok {
				killAll(pgid)
				<-exited
				return nil
			}
			deadline = max(deadline, d)
			current.Store(deadline)
		case <-check:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// waitCommand waits until the command (pid) stops or exits, and returns
// its status. An exited command is left a zombie, not reaped (WNOWAIT):
// its pid is its group's id, which the guard kills until it exits itself,
// and a reaped pid may go to another process, the leader of a group that
// is not the command's. As the guard exits, the zombie goes to init (or
// the nearest subreaper), which reaps it.
func waitCommand(pid int) (syscall.WaitStatus, error) {
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT, nil); err != nil {
		return 0, err
	}
	code, status := info.Code, (*sigchldInfo)(unsafe.Pointer(&info)).Status // read before the next wait reuses info
	switch code {
	case cldExited:
		return syscall.WaitStatus(status&0xff) << 8, nil
	case cldKilled:
		return syscall.WaitStatus(status & 0x7f), nil
	case cldDumped:
		return syscall.WaitStatus(status&0x7f) | 0x80, nil
	case cldTrapped, cldStopped:
		// The report is taken, so that the next wait does not find it
		// again (WSTOPPED alone, which leaves an exit where it is).
		_ = unix.Waitid(unix.P_PID, pid, &info, unix.WSTOPPED|unix.WNOHANG, nil)
		return syscall.WaitStatus(status&0xff)<<8 | 0x7f, nil
	}
	// Another code would be found again by every wait (WNOWAIT): the
	// caller gives up waiting rather than spin.
	return 0, fmt.Errorf("waitid: unexpected si_code %d", code)
}

// sigchldInfo overlays the kernel's siginfo_t of SIGCHLD for its status
// (unix.Siginfo names only signo, errno and code, in each architecture's
// order): the union after those three ints is aligned as a pointer.
type sigchldInfo struct {
	_      [3]int32
	_      [0]uintptr
	Pid    int32
	UID    uint32
	Status int32
}

// si_code of SIGCHLD (asm-generic/siginfo.h).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
	cldStopped = 5
)

// killAll SIGKILLs the command's group and every process descended from
// the guard, the guard's adopted orphans among them (it is their child
// subreaper), and reaps what it adopted; again while any is left alive
// (one may fork as it is killed), for at most a second.
func killAll(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for range 100 {
		left := false
		for _, pid := range descendants(os.Getpid()) {
			if state, _, _, ok := procStat(pid); ok && alive(pid, state) {
				left = true
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		reapAdopted(pgid)
		if !left {
			return
		}
		time.Sleep(10 * time.Millisecond) // dying: no event for a process not the guard's child
	}
}

// reapAdopted reaps the guard's children that have exited, but for the
// command (pid pgid), whose status its own wait takes.
func reapAdopted(pgid int) {
	for _, pid := range children(os.Getpid()) {
		if pid != pgid {
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
	}
}

// descendants lists the processes descended from pid (not pid itself).
func descendants(pid int) []int {
	var out []int
	for next := children(pid); len(next) > 0; {
		out = append(out, next...)
		var deeper []int
		for _, c := range next {
			deeper = append(deeper, children(c)...)
		}
		next = deeper
	}
	return out
}

// children lists pid's children, from /proc/PID/task/*/children.
func children(pid int) []int {
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// procStat is pid's state letter ('Z' for a zombie), parent and process
// group, from /proc/PID/stat; ok is false if it is gone.
func procStat(pid int) (state byte, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')') // pid (comm) state ppid pgrp ...
	if i < 0 {
		return 0, 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	return f[0][0], ppid, pgrp, err1 == nil && err2 == nil
}

// soleMember reports whether this process is the only one in its process
// group: a job of its own, not one member of a pipeline (another member
// may use the terminal: | less) nor of a script's group (a & job without
// job control).
func soleMember() bool {
	self := os.Getpid()
	other, ok := groupHas(unix.Getpgrp(), func(pid int, _ byte) bool { return pid != self })
	return ok && !other
}

// groupLive reports whether a process of group pgid is alive: a zombie
// is not (the guard keeps the command's first one unreaped: waitCommand).
func groupLive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	live, ok := groupHas(pgid, alive)
	return live || !ok
}

// alive reports whether process pid, in state (from its stat), runs: a
// zombie does not, unless only its main thread has exited
// (pthread_exit) while others run, which its stat shows as a zombie too
// (found in review).
func alive(pid int, state byte) bool {
	if state != 'Z' {
		return true
	}
	tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, task := range tasks {
		if tid, err := strconv.Atoi(task.Name()); err == nil && tid != pid {
			if st, _, _, ok := procStat(tid); ok && st != 'Z' {
				return true
			}
		}
	}
	return false
}

// groupHas reports whether a process of group pgid for which match holds
// is in /proc; ok is false if /proc cannot be read.
func groupHas(pgid int, match func(pid int, state byte) bool) (found, ok bool) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, _, pgrp, ok := procStat(pid); ok && pgrp == pgid && match(pid, state) {
			return true, true
		}
	}
	return false, true
}

// stopping, in place of a deadline, says that run is stopping the command
// (SIGTERM, then SIGKILL at its deadline): the guard's own kill at that
// deadline then goes without a word.
const stopping = -1

// readDeadline reads one of run's deadlines: a line of commandDeadline, or
// stopping.
func readDeadline(r *bufio.Reader) (int64, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(line), 10, 64)
}

// commandDeadline is the time the command must be gone by, remaining from
// now, as a reading of CLOCK_BOOTTIME in nanoseconds: a clock run and the
// guard share, which counts the machine's suspension as the holder's
// deadline does (kvlease's holderNow), where Go's monotonic clock and its
// timers do not. The clock is read before remaining is counted, so that
// the sum errs early.
func commandDeadline(remaining func() time.Duration) int64 {
	now := bootClock()
	return now + int64(remaining())
}

// bootClock reads CLOCK_BOOTTIME in nanoseconds.
func bootClock() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("leased: CLOCK_BOOTTIME: %v", err)) // Linux has had it since 2.6.39
	}
	return ts.Nano()
}

// guardFDs parses guardEnv's value.
func guardFDs(v string) (life, report int, format string, ok bool) {
	f := strings.Split(v, ",")
	if len(f) != 3 {
		return 0, 0, "", false
	}
	life, err1 := strconv.Atoi(f[0])
	report, err2 := strconv.Atoi(f[1])
	return life, report, f[2], err1 == nil && err2 == nil && life > 2 && report > 2 && life != report
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
	guard     *exec.Cmd
	pid       int           // the command's, which leads its process group
	life      *os.File      // run's end of the life pipe: closed when run dies
	report    *bufio.Reader // the guard's reports
	closer    io.Closer
	deadlines chan int64    // the latest deadline not yet written to the guard
	closed    chan struct{} // by close
	written   chan struct{} // writeDeadlines is done
	closeOnce sync.Once
	stops     chan struct{} // closed by stopping
	stopOnce  sync.Once
}

// startGuarded starts argv through the guard with env and standard
// streams, to be killed at deadline (commandDeadline) unless extended. ok
// is false if the guard did not start the command (it said why, on
// stderr); g.wait gives its status (127 or 126, startFailure; or 5 past the deadline) then.
func startGuarded(argv, env []string, deadline int64, stdin io.Reader, stdout, stderr io.Writer, format string) (g *guarded, ok bool, err error) {
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, false, err
	}
	defer lifeR.Close()
	// The first deadline waits in the pipe for the guard, which reads it
	// before it starts the command.
	if _, err := fmt.Fprintln(lifeW, deadline); err != nil {
		lifeW.Close()
		return nil, false, err
	}
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
	cmd.Env = append(slices.Clip(env), fmt.Sprintf("%s=%d,%d,%s", guardEnv, lifeFD, lifeFD+1, format))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// A group of its own: the terminal's signals are run's to pass on.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// run keeps the descriptors it passes on: nats.go reads --creds and
	// the TLS files again at each reconnect, and one named /dev/fd/N (a
	// shell's N<file, systemd's OpenFile=) was gone once run closed N, so
	// run lost its lease at the first reconnect (found in review).
	err = cmd.Start()
	reportW.Close()
	if err != nil {
		lifeW.Close()
		reportR.Close()
		return nil, false, err
	}
	g = &guarded{guard: cmd, life: lifeW, report: bufio.NewReader(reportR), closer: reportR,
		deadlines: make(chan int64, 1), closed: make(chan struct{}), written: make(chan struct{}), stops: make(chan struct{})}
	go g.writeDeadlines()
	line, _ := g.report.ReadString('\n')
	if g.pid, err = strconv.Atoi(strings.TrimSpace(line)); err != nil {
		return g, false, nil
	}
	return g, true, nil
}

// wait waits for the command's status and returns it as run reports it:
// nil for 0, an exitStatus otherwise (128+signal for one killed); late if
// the guard saw the exit at or past the command's deadline. A guard that
// reports none (killed itself, with the command's group, at SIGKILL time;
// or it could not start the command) is waited for, and its own status
// stands for the command's.
func (g *guarded) wait() (late bool, err error) {
	line, _ := g.report.ReadString('\n')
	status, lateFlag, _ := strings.Cut(strings.TrimSpace(line), " ")
	n, perr := strconv.ParseUint(status, 10, 32)
	if perr != nil {
		return false, childStatus(g.guard.Wait())
	}
	late = lateFlag == "1"
	switch ws := syscall.WaitStatus(n); {
	case ws.Signaled():
		return late, exitStatus(128 + int(ws.Signal()))
	case ws.ExitStatus() != 0:
		return late, exitStatus(ws.ExitStatus())
	}
	return late, nil
}

// extend tells the guard the command's new deadline (commandDeadline). It
// never blocks: a guard that does not read (stopped) holds up only the
// writer, which then writes the latest deadline given. After close it
// does nothing. It continues a guard stopped on its own (SIGSTOP to its
// pid): run hears of the command's exit from the guard alone, and kept
// renewing the lease of a command gone, for as long as the guard stayed
// stopped (found by an outside client).
func (g *guarded) extend(deadline int64) {
	_ = g.guard.Process.Signal(syscall.SIGCONT)
	for {
		select {
		case g.deadlines <- deadline:
			return
		case old := <-g.deadlines:
			deadline = max(deadline, old)
		case <-g.closed:
			return
		}
	}
}

// writeDeadlines writes extend's deadlines to the guard until close.
func (g *guarded) writeDeadlines() {
	defer close(g.written)
	stops := g.stops
	for {
		var d int64
		select {
		case d = <-g.deadlines:
		case <-stops:
			d, stops = stopping, nil
		case <-g.closed:
			return
		}
		if _, err := fmt.Fprintln(g.life, d); err != nil {
			return // the guard is gone, or close closed the pipe
		}
	}
}

// stopping tells the guard that run is stopping the command itself, and
// continues the guard, as stop does the command's group: run learns of the
// command's exit from the guard alone, and with the guard stopped (SIGSTOP
// to its pid) run, sent SIGTERM, killed the command and waited for good,
// renewing the lease of a command that was gone (found by an outside
// client). It never blocks.
func (g *guarded) stopping() {
	g.stopOnce.Do(func() {
		close(g.stops)
		_ = g.guard.Process.Signal(syscall.SIGCONT)
	})
}

// close closes run's end of the life pipe, so that the guard kills what is
// left of the command (killAll) and exits, and waits for it. Once.
func (g *guarded) close() {
	g.closeOnce.Do(func() {
		close(g.closed)
		g.life.Close() // ends a write the guard does not read
		<-g.written
		_ = g.guard.Wait()
		g.closer.Close()
	})
}

// stopJob stops run's job when the command was stopped while its group
// had the terminal (Ctrl-Z, or any stop signal, as a shell sees its job
// stopped): the terminal goes back to run's group, which gets SIGTSTP, so
// that its shell sees the job stopped and takes the terminal back, as it
// would without run; `fg` continues run, which gives the command the
// terminal again and continues it (see terminal). Without it, Ctrl-Z left
// the terminal to a stopped group and the shell waiting on run. A command
// stopped without the terminal is left so. While run is stopped it renews
// nothing: the guard kills the command at its deadline.
func stopJob(pgid, runGroup int) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	fd := int(tty.Fd())
	if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err != nil || fg != pgid || runGroup <= 1 {
		return
	}
	if orphaned(os.Getppid()) {
		// No shell to take the terminal back and fg the job (run leads
		// its session: ssh -t, script, exec): the kernel discards a stop
		// of such a group, and so does the guard, which continues the
		// command. It stayed stopped for good (found in review).
		_ = syscall.Kill(-pgid, syscall.SIGCONT)
		return
	}
	if unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, runGroup) == nil && syscall.Kill(-runGroup, syscall.SIGTSTP) == nil {
		go resumeJob(pgid, runGroup, os.Getppid())
	}
}

// resumeJob, while the command stopJob stopped stays stopped, does what
// run's SIGCONT handler does once run runs again (see terminal.give):
// gives the command the terminal if run's group holds it (fg), and
// continues it (fg, bg, or any SIGCONT to run). That handler alone missed
// its SIGCONT now and then — the Go runtime delivered no notification to
// a process stopped and continued within milliseconds, as a script's fg
// does (2 runs in 40 under load) — and the command stayed stopped, after
// fg with the terminal left to run, for good.
func resumeJob(pgid, runGroup, run int) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	awaitResume(ttyGroups{int(tty.Fd())}, pgid, runGroup, run)
}

// awaitResume is resumeJob on the terminal term: it acts once run has
// been seen running, the command stopped, for resumeHeld looks in a row,
// which pass over the moment after stopJob before run has stopped. It
// ends when the command runs again, or either is gone. Before, it acted
// only while run's group held the terminal, and after bg the command
// was left to run's handler alone (found in review).
func awaitResume(term foregroundGroup, pgid, runGroup, run int) {
	for held := 0; held < resumeHeld; time.Sleep(resumePoll) {
		cmd, _, _, ok1 := procStat(pgid)
		r, _, _, ok2 := procStat(run)
		switch {
		case !ok1 || !ok2 || cmd != 'T' || r == 'Z':
			return // continued (by run), or gone
		case r != 'T':
			held++
		default:
			held = 0
		}
	}
	if fg, err := term.foreground(); err == nil && fg == runGroup {
		_ = term.setForeground(pgid)
	}
	_ = syscall.Kill(-pgid, syscall.SIGCONT)
}

// foregroundGroup is a terminal's foreground process group.
type foregroundGroup interface {
	foreground() (int, error)
	setForeground(pgid int) error
}

// ttyGroups is the foregroundGroup of the terminal open on fd.
type ttyGroups struct{ fd int }

func (t ttyGroups) foreground() (int, error) { return unix.IoctlGetInt(t.fd, unix.TIOCGPGRP) }
func (t ttyGroups) setForeground(pgid int) error {
	return unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgid)
}

// resumePoll is how often resumeJob looks, and resumeHeld how many looks
// in a row must find the job continued with the command left stopped.
const (
	resumePoll = 50 * time.Millisecond
	resumeHeld = 4
)

// orphaned reports whether the process group of pid, its only member
// (see soleMember), is orphaned: its parent is not in another group of
// its session, so no job control stops or continues it.
func orphaned(pid int) bool {
	_, parent, _, ok := procStat(pid)
	if !ok {
		return true
	}
	pgrp, err1 := syscall.Getpgid(pid)
	ppgrp, err2 := syscall.Getpgid(parent)
	sid, err3 := unix.Getsid(pid)
	psid, err4 := unix.Getsid(parent)
	return errors.Join(err1, err2, err3, err4) != nil || ppgrp == pgrp || psid != sid
}

// quietTTOU makes the guard ignore SIGTTOU (see guard).
func quietTTOU() { signal.Ignore(syscall.SIGTTOU) }

// terminal is run's controlling terminal, which the command's group has
// while it runs, as a shell's job would: from a background group, a
// command that read it was stopped (SIGTTIN) and run waited for good.
type terminal struct {
	mu        sync.Mutex
	tty       *os.File // nil: no handover (see foreground)
	own, pgid int      // run's group, the command's
	cont      chan os.Signal
	// ttouIgnored: run was started ignoring SIGTTOU, which it ignores
	// while the command has the terminal.
	ttouIgnored bool
}

// foreground gives the command's group pgid run's controlling terminal
// whenever run's group has it, if run reads that terminal (its standard
// input) and is alone in its group: a job of its own (see soleMember; one
// among others, run took the terminal from a script or a pipeline's
// | less, which stopped: found in review). The command keeps it until
// giveBack; run continued (fg, after a start in the background or after
// stopJob stopped it) gives it to the command again.
func foreground(pgid int) *terminal {
	t := &terminal{own: unix.Getpgrp(), pgid: pgid}
	if _, err := unix.IoctlGetTermios(0, unix.TCGETS); err != nil {
		return t // standard input is no terminal
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return t // no controlling terminal
	}
	if !soleMember() {
		tty.Close()
		return t
	}
	t.tty = tty
	// run writes its log lines to the terminal while in the background:
	// one that stops such writers (stty tostop) would have stopped run,
	// and its renewals; and giveBack sets the foreground from there.
	t.ttouIgnored = signal.Ignored(syscall.SIGTTOU)
	signal.Ignore(syscall.SIGTTOU)
	t.give()
	t.cont = make(chan os.Signal, 1)
	signal.Notify(t.cont, syscall.SIGCONT)
	go func() {
		for range t.cont {
			t.mu.Lock()
			if t.tty != nil {
				t.give()
			}
			t.mu.Unlock()
		}
	}()
	return t
}

// give gives the terminal to the command's group, if run's group has it,
// and continues the command: one that read the terminal before it had it
// was stopped (SIGTTIN), and one stopJob stopped waits for it, as shells
// continue a job they bring to the foreground.
func (t *terminal) give() {
	fd := int(t.tty.Fd())
	if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg == t.own {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, t.pgid)
	}
	_ = syscall.Kill(-t.pgid, syscall.SIGCONT)
}

// giveBack gives the terminal back to run's group, once the command has
// exited; after the first call it does nothing.
func (t *terminal) giveBack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.tty == nil {
		return
	}
	signal.Stop(t.cont)
	close(t.cont)
	fd := int(t.tty.Fd())
	if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg == t.pgid {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, t.own)
	}
	if !t.ttouIgnored {
		signal.Reset(syscall.SIGTTOU)
	}
	t.tty.Close()
	t.tty = nil
}

// startFailure is the exit status of a command that could not be started,
// as env(1), timeout(1) and the shells give it: 127 if it was not found,
// 126 if it was found but could not be run (not executable, a directory).
// It was 127 for both, which a caller could not tell apart.
func startFailure(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}
