package kvlease_test

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The test binary doubles as the child process of the fault tests: with
// KVLEASE_CHILD set it runs a child role instead of the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("KVLEASE_CHILD"); role != "" {
		if err := runChild(role, os.Getenv("KVLEASE_URL")); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// startChild runs this test binary as the child role, and returns it, its
// stdin, and a function that returns its next line of output (failing the
// test if none comes within 20 s).
func startChild(t *testing.T, role, url string) (*exec.Cmd, io.WriteCloser, func() string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KVLEASE_CHILD="+role, "KVLEASE_URL="+url)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	return cmd, stdin, func() string {
		t.Helper()
		got := make(chan string, 1)
		go func() {
			if lines.Scan() {
				got <- lines.Text()
			}
			close(got)
		}()
		select {
		case l, ok := <-got:
			if !ok {
				t.Fatal("child exited early")
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("child said nothing")
		}
		return ""
	}
}

// childStore connects a child process to url (reconnecting forever) and
// opens the lease store with opts.
func childStore(ctx context.Context, url string, opts ...kvlease.Option) (jetstream.JetStream, *kvlease.Store, error) {
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	st, err := kvlease.Open(ctx, js, opts...)
	return js, st, err
}

// runChild runs the role a fault test asked for in KVLEASE_CHILD.
func runChild(role, url string) error {
	switch role {
	case "paused-writer":
		return pausedWriter(url)
	case "candidate":
		return candidate(url)
	case "worker":
		return worker(url)
	case "elect-writer":
		return electWriter(url)
	case "read-leader":
		return readLeader(url)
	}
	return fmt.Errorf("unknown role %q", role)
}

// candidate campaigns in the election named by KVLEASE_ELECTION for
// KVLEASE_D, says "leading <token>", and leads until it is killed.
func candidate(url string) error {
	ctx := context.Background()
	_, st, err := childStore(ctx, url)
	if err != nil {
		return err
	}
	e, err := kvlease.NewElection(st, os.Getenv("KVLEASE_ELECTION"))
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(os.Getenv("KVLEASE_D"))
	if err != nil {
		return err
	}
	l, err := e.Campaign(ctx, "child", d, nil)
	if err != nil {
		return err
	}
	fmt.Printf("leading %d\n", l.Token())
	<-l.Done()
	return l.Err()
}

// worker claims and completes items of the queue "jobs" until killed,
// printing "claim <item> <token>", "done <item> <token>" or
// "refused <item> <error>".
func worker(url string) error {
	ctx := context.Background()
	js, st, err := childStore(ctx, url)
	if err != nil {
		return err
	}
	q, err := kvlease.OpenWorkQueue(ctx, js, st, "jobs", 1)
	if err != nil {
		return err
	}
	name := os.Getenv("KVLEASE_WORKER")
	for {
		c, err := q.Claim(ctx, name, 2*time.Second)
		if err != nil {
			return err
		}
		fmt.Printf("claim %s %d\n", c.Item, c.Token())
		time.Sleep(10 * time.Millisecond) // the work
		if err := c.Complete(ctx, []byte(name)); err != nil {
			fmt.Printf("refused %s %v\n", c.Item, err)
			continue
		}
		fmt.Printf("done %s %d\n", c.Item, c.Token())
	}
}

// pausedWriter is a holder that takes the lease, checks it, reports
// "checked", and then waits for a line on stdin before its write: the parent
// stops it (SIGSTOP) between the check and the effect, exactly where a GC
// pause or a VM migration would hurt.
func pausedWriter(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	js, st, err := childStore(ctx, url, kvlease.WithGrantorMargin(0))
	if err != nil {
		return err
	}
	fence, err := kvlease.OpenKVFence(ctx, js, "fences", 1)
	if err != nil {
		return err
	}
	l, err := kvlease.Acquire(ctx, st, "writer", "child", time.Second)
	if err != nil {
		return err
	}
	k, err := kvlease.Keep(ctx, l)
	if err != nil {
		return err
	}
	defer k.Stop()
	if err := l.Check(); err != nil {
		return err
	}
	fmt.Printf("checked %d\n", l.Token())
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return err
	}
	// Resumed: the check above passed, so the write goes out. Only the
	// fence can stop it.
	err = fence.Write(ctx, "account-42", l.Token(), []byte("from the paused holder"))
	var stale *kvlease.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("rejected %d %d\n", stale.Token, stale.Highest)
		return nil
	}
	fmt.Printf("accepted %v\n", err)
	return nil
}

// A holder paused past expiry (a real process stopped with SIGSTOP and
// resumed) has its write refused by the fence; its replacement's token is
// higher and its write stands.
func TestPausedHolderWriteRejectedByFence(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithGrantorMargin(0))
	w := watch(t, st, "")
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	fence, err := kvlease.OpenKVFence(t.Context(), js, "fences", 1)
	if err != nil {
		t.Fatal(err)
	}

	cmd, stdin, line := startChild(t, "paused-writer", srv.ClientURL())

	var childToken kvlease.Token
	if _, err := fmt.Sscanf(line(), "checked %d", &childToken); err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// While the child is stopped its lease lapses on the server, with no
	// message from the child.
	ev := nextEvent(t, w, 5*time.Second, ofType("writer", kvlease.EventExpired))
	if ev.Token != childToken {
		t.Fatalf("expired token %d, want the child's %d", ev.Token, childToken)
	}
	next, err := kvlease.Acquire(t.Context(), st, "writer", "replacement", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= childToken {
		t.Fatalf("replacement token %d, want > %d", next.Token(), childToken)
	}
	if err := next.Check(); err != nil {
		t.Fatal(err)
	}
	if err := fence.Write(t.Context(), "account-42", next.Token(), []byte("from the replacement")); err != nil {
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
	v, err := fence.Read(t.Context(), "account-42")
	if err != nil || v.Token != next.Token() || !strings.Contains(string(v.Data), "replacement") {
		t.Fatalf("resource = %+v, %v; want the replacement's write", v, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if fence.Rejected() != 0 {
		t.Fatal("the parent's fence counted a rejection it did not make")
	}
}
