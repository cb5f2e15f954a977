package fence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The test binary doubles as the child process of the fault test.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{"paused-writer": pausedWriter, "pg-paused-writer": pgPausedWriter})
}

// pausedWriter is a holder that takes the lease, checks it, reports
// "checked", and then waits for a line on stdin before its write: the parent
// stops it (SIGSTOP) between the check and the effect, exactly where a GC
// pause or a VM migration would hurt.
func pausedWriter(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, st, err := kvleasetest.ChildStore(ctx, url, kvlease.WithGrantorMargin(0))
	if err != nil {
		return err
	}
	fc, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		return err
	}
	l, stop, err := checkedThenResumed(ctx, st, "writer")
	if err != nil {
		return err
	}
	defer stop()
	// Resumed: the check above passed, so the write goes out. Only the
	// fence can stop it.
	err = fc.Write(ctx, "account-42", l.Token(), []byte("from the paused holder"))
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("rejected %d %d\n", stale.Token, stale.Highest)
		return nil
	}
	fmt.Printf("accepted %v\n", err)
	return nil
}

// checkedThenResumed acquires name on st for a second, keeps it, checks
// it, prints "checked TOKEN" for the parent, and returns once the parent
// writes a line on stdin (it pauses the process in between). stop ends the
// keeper without a release.
func checkedThenResumed(ctx context.Context, st *kvlease.Store, name string) (l *kvlease.Lease, stop func(), err error) {
	l, err = kvlease.Acquire(ctx, st, name, "child", time.Second)
	if err != nil {
		return nil, nil, err
	}
	k, err := kvlease.Keep(ctx, l)
	if err != nil {
		return nil, nil, err
	}
	if err := l.Check(); err != nil {
		k.Orphan()
		return nil, nil, err
	}
	fmt.Printf("checked %d\n", l.Token())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		k.Orphan()
		return nil, nil, err
	}
	return l, k.Orphan, nil
}

// A holder paused past expiry (a real process stopped with SIGSTOP and
// resumed) has its write refused by the fence; its replacement's token is
// higher and its write stands.
func TestPausedHolderWriteRejectedByFence(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithGrantorMargin(0))
	w := kvleasetest.Watch(t, st, "")
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	fc, err := fence.OpenKV(t.Context(), js, "fences")
	if err != nil {
		t.Fatal(err)
	}

	cmd, stdin, line := kvleasetest.StartChild(t, "paused-writer", srv.ClientURL())

	childToken, next := pauseChildPastLease(t, cmd, line, w, st, "writer")
	if err := fc.Write(t.Context(), "account-42", next.Token(), []byte("from the replacement")); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	got := line()
	if want := fmt.Sprintf("rejected %d %d", childToken, next.Token()); got != want {
		t.Fatalf("child's write: %q, want %q", got, want)
	}
	v, err := fc.Read(t.Context(), "account-42")
	if err != nil || v.Token != next.Token() || !strings.Contains(string(v.Data), "replacement") {
		t.Fatalf("resource = %+v, %v; want the replacement's write", v, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if fc.Rejected() != 0 {
		t.Fatal("the parent's fence counted a rejection it did not make")
	}
}

// pauseChildPastLease reads the child's "checked TOKEN" line, stops the
// child with SIGSTOP, waits for its lease on name to lapse on the server,
// and acquires the lease for a replacement, which must get a higher token.
func pauseChildPastLease(t *testing.T, cmd *exec.Cmd, line func() string, w *kvlease.Watcher, st *kvlease.Store,
	name string) (kvlease.Token, *kvlease.Lease) {
	t.Helper()
	var childToken kvlease.Token
	if _, err := fmt.Sscanf(line(), "checked %d", &childToken); err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While the child is stopped its lease lapses on the server, with no
	// message from the child.
	ev := kvleasetest.NextEvent(t, w, 5*time.Second, kvleasetest.OfType(name, kvlease.EventExpired))
	if ev.Token != childToken {
		t.Fatalf("expired token %d, want the child's %d", ev.Token, childToken)
	}
	next, err := kvlease.Acquire(t.Context(), st, name, "replacement", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= childToken {
		t.Fatalf("replacement token %d, want > %d", next.Token(), childToken)
	}
	if err := next.Check(); err != nil {
		t.Fatal(err)
	}
	return childToken, next
}
