package kvleasetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// Child processes: a fault test that stops a holder (SIGSTOP) or kills it
// needs the holder in a process of its own. The test binary doubles as that
// process: run with the environment variable KVLEASE_CHILD set to a role,
// it runs the role instead of the tests, with KVLEASE_URL as the server.
const (
	EnvChild = "KVLEASE_CHILD"
	EnvURL   = "KVLEASE_URL"
)

// Main is a TestMain for a package whose tests start children: with
// [EnvChild] set, it runs roles[role]([EnvURL]) and exits, 0 if the role
// returned nil, 1 after printing "error <err>" otherwise; without it, it
// runs the tests.
func Main(m *testing.M, roles map[string]func(url string) error) {
	if role := os.Getenv(EnvChild); role != "" {
		run, ok := roles[role]
		err := fmt.Errorf("unknown role %q", role)
		if ok {
			err = run(os.Getenv(EnvURL))
		}
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// StartChild runs this test binary as the child role (see [Main]) on url,
// with env added to its environment, and returns it, its stdin, and a
// function that returns its next line of output (failing the test if none
// comes within 20 s). The child is killed on cleanup.
func StartChild(tb testing.TB, role, url string, env ...string) (*exec.Cmd, io.WriteCloser, func() string) {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), EnvChild+"="+role, EnvURL+"="+url), env...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	return cmd, stdin, func() string {
		tb.Helper()
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
				tb.Fatal("child exited early")
			}
			return l
		case <-time.After(20 * time.Second):
			tb.Fatal("child said nothing")
		}
		return ""
	}
}

// ChildStore connects a child process to url (reconnecting forever) and
// opens the lease store with opts. A child has no testing.TB: it returns
// errors for its role to report.
func ChildStore(ctx context.Context, url string, opts ...kvlease.Option) (jetstream.JetStream, *kvlease.Store, error) {
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
