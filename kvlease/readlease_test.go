package kvlease_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// readLeader leads "leader.read", writes "v1" to the fenced resource and
// keeps it as local state; for every line on stdin it serves a read and
// prints "read <value> <served-from>".
func readLeader(url string) error {
	ctx := context.Background()
	js, st, err := childStore(ctx, url)
	if err != nil {
		return err
	}
	fence, err := kvlease.OpenKVFence(ctx, js, "fences", 1)
	if err != nil {
		return err
	}
	e, _ := kvlease.NewElection(st, "leader.read")
	lead, err := e.Campaign(ctx, "first", time.Second, nil)
	if err != nil {
		return err
	}
	if err := fence.Write(ctx, "config", lead.Token(), []byte("v1")); err != nil {
		return err
	}
	local := "v1"
	fmt.Println("leading")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		v, from, err := kvlease.ReadThrough(ctx, lead.Lease(), 100*time.Millisecond,
			func() (string, error) { return local, nil },
			func(ctx context.Context) (string, error) {
				fv, err := fence.Read(ctx, "config")
				return string(fv.Data), err
			})
		if err != nil {
			return err
		}
		fmt.Printf("read %s %s\n", v, from)
	}
	return nil
}

// A leader serves reads from local state while its lease is held; paused
// past its lease while another leader writes, it does not serve its stale
// local state when it resumes.
func TestReadLeaseNotServedStaleAfterPause(t *testing.T) {
	srv, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	fence, err := kvlease.OpenKVFence(ctx, js, "fences", 1)
	if err != nil {
		t.Fatal(err)
	}
	cmd, stdin, line := startChild(t, "read-leader", srv.ClientURL())
	read := func() string {
		t.Helper()
		if _, err := io.WriteString(stdin, "read\n"); err != nil {
			t.Fatal(err)
		}
		return line()
	}
	if l := line(); l != "leading" {
		t.Fatalf("child: %q", l)
	}
	if got := read(); got != "read v1 local" {
		t.Fatalf("read while leading: %q, want local v1", got)
	}
	// Pause the leader; another leads once its lease lapses, and writes.
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	e, _ := kvlease.NewElection(st, "leader.read")
	second, err := e.Campaign(ctx, "second", 5*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Stop()
	if err := fence.Write(ctx, "config", second.Token(), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.HasPrefix(got, "read v2 ") || !strings.HasSuffix(got, string(kvlease.ServedAuthoritative)) {
		t.Fatalf("read after the pause: %q, want v2 served authoritatively (not the stale local v1)", got)
	}
}
