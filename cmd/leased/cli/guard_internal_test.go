package cli

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// mainThreadExitsRole makes the test binary a process whose main thread
// exits while its other threads run: its /proc/PID/stat says zombie.
const mainThreadExitsRole = "LEASED_TEST_MAIN_THREAD_EXITS"

func TestMain(m *testing.M) {
	if os.Getenv(mainThreadExitsRole) != "" {
		runtime.LockOSThread() // the main goroutine on the main thread
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
