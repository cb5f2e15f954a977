package kvleasetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/leased/leased/kvlease"
)

// RoleServer is the child role (see [Main]) of [StartChildServer]: add it,
// with [ServeChild], to the roles a package's TestMain gives Main.
const RoleServer = "nats-server"

const (
	envServerDir  = "KVLEASE_SERVER_DIR"
	envServerPort = "KVLEASE_SERVER_PORT"
)

// ServeChild is [RoleServer]'s function: it serves JetStream (sync
// always) on the port and data directory its environment names, says
// "ready", and runs until its stdin closes or it is killed.
func ServeChild(string) error {
	port, err := strconv.Atoi(os.Getenv(envServerPort))
	if err != nil {
		return err
	}
	srv, err := Start(os.Getenv(envServerDir), WithPort(port))
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

// ChildServer is a nats-server in a child process (the test binary in
// [RoleServer]), whose data directory outlives it: a test can SIGKILL it,
// which it cannot do to a server in its own process, and start it again
// on its data, on the same port.
type ChildServer struct {
	URL   string
	Dir   string
	tb    testing.TB
	env   []string
	proc  *exec.Cmd
	stdin io.WriteCloser
}

// StartChildServer starts a child server on a free port with a new data
// directory, waits until it is ready, and kills it on cleanup.
func StartChildServer(tb testing.TB) *ChildServer {
	tb.Helper()
	port := FreePort(tb)
	c := &ChildServer{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Dir: tb.TempDir(), tb: tb}
	c.env = []string{envServerDir + "=" + c.Dir, envServerPort + "=" + strconv.Itoa(port)}
	c.Restart()
	return c
}

// Restart starts the server again on its data and port and waits until it
// is ready.
func (c *ChildServer) Restart() {
	c.tb.Helper()
	cmd, stdin, next := StartChild(c.tb, RoleServer, "", c.env...)
	if l := next(); l != "ready" {
		c.tb.Fatalf("kvleasetest: server child said %q", l)
	}
	c.proc, c.stdin = cmd, stdin
}

// Stop shuts the server down cleanly (it writes its index and TTL state)
// and waits for it to exit.
func (c *ChildServer) Stop() {
	c.tb.Helper()
	c.stdin.Close()
	if err := c.proc.Wait(); err != nil {
		c.tb.Fatalf("kvleasetest: server child stopping: %v", err)
	}
}

// Kill SIGKILLs the server and waits for it to exit: its data is as an
// unclean stop (a crash, a power loss) leaves it.
func (c *ChildServer) Kill() {
	c.tb.Helper()
	if err := c.proc.Process.Signal(syscall.SIGKILL); err != nil {
		c.tb.Fatal(err)
	}
	_ = c.proc.Wait()
}

// Pause stops the server with SIGSTOP, and returns once it has stopped
// ([StopProcess]): it keeps its connections and answers nothing until
// [ChildServer.Resume], as a process paused by the kernel, a debugger or a
// VM's host does.
func (c *ChildServer) Pause() { StopProcess(c.tb, c.proc.Process) }

// StopProcess sends p, a child of this process, SIGSTOP and returns once
// all its threads have stopped (waitid WSTOPPED, without reaping it). kill
// returns before the signal has stopped every thread: a thread still
// running can carry out a request sent just after it, which a test that
// means the request to wait in the stopped process must not allow (a
// paused server answered a read at once: TestUnansweredReadsEndWithoutADeadline
// failed so in a CI run).
func StopProcess(tb testing.TB, p *os.Process) {
	tb.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		tb.Fatal(err)
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, p.Pid, &info, unix.WSTOPPED|unix.WNOWAIT, nil)
		if err == nil {
			return
		}
		if !errors.Is(err, unix.EINTR) {
			tb.Fatalf("kvleasetest: waiting for pid %d to stop: %v", p.Pid, err)
		}
	}
}

// PauseProcess stops p as StopProcess does, until resume is called or
// the test ends, whichever comes first.
func PauseProcess(tb testing.TB, p *os.Process) (resume func()) {
	tb.Helper()
	StopProcess(tb, p)
	resume = sync.OnceFunc(func() { _ = p.Signal(syscall.SIGCONT) })
	tb.Cleanup(resume)
	return resume
}

// Resume continues a paused server (SIGCONT).
func (c *ChildServer) Resume() { c.signal(syscall.SIGCONT) }

func (c *ChildServer) signal(sig syscall.Signal) {
	if err := c.proc.Process.Signal(sig); err != nil {
		c.tb.Errorf("kvleasetest: %v to the server child: %v", sig, err)
	}
}

// LoseExpiries makes srv bring back the leases names, which st has just
// granted (less than a second ago) for 1 s on a bucket whose markers last
// 1 s, with their expiries lost, as nats-server v2.15.2 and v2.15.3 do after
// an unclean stop (issue 8505: it writes no tombstone for a message it
// removes by TTL). It grants leases that outlive the test after them (so
// that their block keeps messages after theirs), waits until the leases
// and their markers have lapsed, restarts srv cleanly (which writes its
// index and TTL state, without them), writes through st so that the block
// changes, and SIGKILLs and restarts srv: it rebuilds the block from its
// file, where their messages still are, and rescans TTLs only from its
// state's sequence on, so it never lapses them again. It fails the test if
// the server did not bring them back.
func (c *ChildServer) LoseExpiries(st *kvlease.Store, names ...string) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("kvleasetest.after.%d", i), Holder: "h", Duration: time.Hour}); err != nil {
			c.tb.Fatal(err)
		}
	}
	nc, err := nats.Connect(c.URL)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream, err := js.Stream(ctx, kvlease.StreamName(kvlease.DefaultBucket))
	if err != nil {
		c.tb.Fatal(err)
	}
	for _, name := range names {
		for {
			_, err := stream.GetLastMsgForSubject(ctx, "$KV."+kvlease.DefaultBucket+"."+name)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if ctx.Err() != nil {
				c.tb.Fatalf("kvleasetest: %s still has a message: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond) // bounded poll: the server removes a marker with no event
		}
	}
	c.Stop()
	c.Restart()
	for i := range 5 {
		_, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (kvlease.Record, error) { // reconnecting
			return st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("kvleasetest.later.%d", i), Holder: "h", Duration: time.Hour})
		})
		if err != nil {
			c.tb.Fatal(err)
		}
	}
	c.Kill()
	c.Restart()
	// The reproduction holds only if the server did bring them back.
	nc2, err := nats.Connect(c.URL)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	stream, err = js2.Stream(ctx, kvlease.StreamName(kvlease.DefaultBucket))
	if err != nil {
		c.tb.Fatal(err)
	}
	for _, name := range names {
		if _, err := stream.GetLastMsgForSubject(ctx, "$KV."+kvlease.DefaultBucket+"."+name); err != nil {
			c.tb.Fatalf("kvleasetest: the server did not bring %s back (%v): the reproduction no longer holds", name, err)
		}
	}
}
