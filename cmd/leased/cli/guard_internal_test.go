package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mainThreadExitsRole makes the test binary a process whose main thread
// exits while its other threads run: its /proc/PID/stat says zombie.
const mainThreadExitsRole = "LEASED_TEST_MAIN_THREAD_EXITS"

// init locks the main goroutine to the main thread for mainThreadExitsRole:
// init functions run on it, and the lock keeps main (and TestMain) there.
func init() {
	if os.Getenv(mainThreadExitsRole) != "" {
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == guardCommand { // startGuarded's /proc/self/exe
		err := guard(os.Args[2:], os.Stderr)
		var status exitStatus
		switch {
		case errors.As(err, &status):
			os.Exit(int(status))
		case err != nil:
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(mainThreadExitsRole) != "" {
		// Locked to the main thread since init: a lock taken here held the
		// main goroutine to whichever thread it ran on by then, not always
		// the main one, whose exit alone makes the stat say zombie (the
		// test failed now and then, in CI: "the main thread did not
		// exit").
		go func() {
			for {
				time.Sleep(time.Hour)
			}
		}()
		os.Stdout.WriteString("ready\n")
		syscall.RawSyscall(syscall.SYS_EXIT, 0, 0, 0) // this thread only, not the process
	}
	os.Exit(m.Run())
}

// A process whose main thread has exited while others run is alive,
// though its stat says zombie: groupLive took its group for empty, and run
// skipped the SIGTERM and grace of what its command left (found in
// review).
func TestGroupLiveWithAMainThreadGone(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), mainThreadExitsRole+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) { // bounded poll: no event for a thread's exit
		if state, _, _, ok := procStat(pid); ok && state == 'Z' {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the main thread did not exit")
		}
	}
	if !alive(pid, 'Z') || !groupLive(pid) {
		t.Fatalf("pid %d, its main thread gone and its others running: alive %v, group live %v; want both",
			pid, alive(pid, 'Z'), groupLive(pid))
	}
}

// The guard says whether it saw the command's exit past the deadline: run
// took the time itself when it read the report, and a run held up after
// an exit in time made it exit 5 (found in review). Here the guard is
// stopped across the deadline while its command exits 0, and then is not.
func TestGuardSaysWhetherTheExitWasLate(t *testing.T) {
	for _, stopGuard := range []bool{true, false} {
		t.Run(fmt.Sprintf("guard stopped %t", stopGuard), func(t *testing.T) { guardReportsLate(t, stopGuard) })
	}
}

func guardReportsLate(t *testing.T, stopGuard bool) {
	// 3 s: the guard and its command start, and the command stops itself,
	// well within it even on a loaded machine (1 s was tight: reviewed).
	deadline := bootClock() + int64(3*time.Second)
	g, ok, err := startGuarded([]string{"sh", "-c", "kill -STOP $$; exit 0"}, os.Environ(), deadline, nil, os.Stdout, os.Stderr, "text")
	if err != nil || !ok {
		t.Fatalf("startGuarded: %v, started %t", err, ok)
	}
	defer g.close()
	waitState(t, g.pid, 'T')
	if stopGuard {
		if err := g.guard.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		waitState(t, g.guard.Process.Pid, 'T')
		time.Sleep(time.Duration(deadline-bootClock()) + 10*time.Millisecond) // past the deadline, by the guard's clock
	}
	if err := syscall.Kill(g.pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, g.pid, 'Z') // exited; the guard keeps it a zombie
	if stopGuard {
		if err := g.guard.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
	}
	if late, err := g.wait(); err != nil || late != stopGuard {
		t.Errorf("guard stopped across the deadline %t: wait() = late %t, %v; want late %t, nil", stopGuard, late, err, stopGuard)
	}
}

// waitState waits until pid's state is state.
func waitState(t *testing.T, pid int, state byte) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) { // bounded poll: no event for another's state
		if st, _, _, ok := procStat(pid); ok && st == state {
			return
		}
		if time.Now().After(end) {
			st, _, _, _ := procStat(pid)
			t.Fatalf("pid %d in state %q, not %q, after 10 s", pid, st, state)
		}
	}
}

// fakeGroups is a terminal's foreground group, for awaitResume.
type fakeGroups struct {
	mu sync.Mutex
	fg int
}

func (f *fakeGroups) foreground() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fg, nil
}

func (f *fakeGroups) setForeground(pgid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fg = pgid
	return nil
}

// Once run runs again after Ctrl-Z (fg or bg), the guard continues the
// command if run's own SIGCONT handler has not, and gives it the terminal
// if run's group holds it: after bg, with the shell holding the terminal,
// it used to leave the command to that handler, which can miss its
// SIGCONT, and the command stayed stopped for good (found in review).
func TestAwaitResumeContinuesTheCommand(t *testing.T) {
	for _, bg := range []bool{false, true} {
		t.Run(fmt.Sprintf("bg %t", bg), func(t *testing.T) {
			start := func(args ...string) *exec.Cmd {
				c := exec.Command(args[0], args[1:]...)
				c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
				return c
			}
			cmd := start("sleep", "60")
			run := start("sleep", "60") // run, continued by the shell
			if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			waitState(t, cmd.Process.Pid, 'T')
			shell := unix.Getpgrp()
			term := &fakeGroups{fg: run.Process.Pid} // fg: run's group holds the terminal
			if bg {
				term.fg = shell
			}
			done := make(chan struct{})
			go func() { defer close(done); awaitResume(term, cmd.Process.Pid, run.Process.Pid, run.Process.Pid) }()
			waitState(t, cmd.Process.Pid, 'S')
			<-done
			want := cmd.Process.Pid
			if bg {
				want = shell
			}
			if fg, _ := term.foreground(); fg != want {
				t.Errorf("the terminal's foreground is %d, want %d (command %d, shell %d)", fg, want, cmd.Process.Pid, shell)
			}
		})
	}
}
