package main_test

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leased/leased/cmd/leased/cli"
)

// Two serve processes on one data directory would each grant from their own
// copy of the store, one fencing token twice. The second must exit at once,
// naming the directory and the first one's pid; once the first has exited,
// by SIGTERM or SIGKILL (the kernel drops the flock), a new one starts.
func TestServeLocksDataDir(t *testing.T) {
	dir := t.TempDir()
	first := startServe(t, dir)
	r := leased(t, "", "serve", "--listen", "127.0.0.1:0", "--data", dir, "--log-format", "json")
	pid := "pid " + strconv.Itoa(first.cmd.Process.Pid)
	if r.code != cli.ExitError || !strings.Contains(r.stderr, dir) || !strings.Contains(r.stderr, pid) {
		t.Fatalf("second serve on %s: exit %d, stderr:\n%s\nwant exit %d naming the directory and %s",
			dir, r.code, r.stderr, cli.ExitError, pid)
	}
	first.stop(t)
	second := startServe(t, dir)
	if err := second.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = second.cmd.Wait()
	startServe(t, dir)
}
