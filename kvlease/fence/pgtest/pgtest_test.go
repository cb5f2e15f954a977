package pgtest

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a process that starts a server and is then
// killed (TestWatchdogCleansUpAfterKill).
func TestMain(m *testing.M) {
	if os.Getenv("PGTEST_CHILD") == "start-and-hang" {
		s, err := StartServer()
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(s.dir, s.port, s.watchdog.Process.Pid)
		select {} // until killed
	}
	os.Exit(m.Run())
}

func open(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func ping(ctx context.Context, db *sql.DB) error {
	var one int
	return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
}

// A server starts on 127.0.0.1 as an unprivileged user, refuses
// connections while stopped, starts again with its data, and leaves
// nothing behind when closed.
func TestServerLifecycle(t *testing.T) {
	s := NewServer(t)
	ctx := t.Context()
	db := open(t, s.DSN())
	db.SetMaxIdleConns(0) // a new connection for every statement: no pooled conn outlives a stop
	if _, err := db.ExecContext(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	var user string
	if err := db.QueryRowContext(ctx, "SELECT current_user").Scan(&user); err != nil || user != User {
		t.Fatalf("current_user = %q, %v; want %q", user, err, User)
	}
	var listen string
	if err := db.QueryRowContext(ctx, "SHOW listen_addresses").Scan(&listen); err != nil || listen != "127.0.0.1" {
		t.Fatalf("listen_addresses = %q, %v", listen, err)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(s.data())
		if err != nil {
			t.Fatal(err)
		}
		if owner := fi.Sys().(*syscall.Stat_t).Uid; owner == 0 || owner != s.cred.Uid {
			t.Fatalf("data directory owned by uid %d, want the unprivileged %d", owner, s.cred.Uid)
		}
	}

	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, db); err == nil {
		t.Fatal("a stopped server answered")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("after a restart: %d, %v; want 42", v, err)
	}

	dir, port := s.dir, s.port
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("directory %s after Close: %v", dir, err)
	}
	if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
		c.Close()
		t.Fatalf("port %d still open after Close", port)
	}
	if err := s.Start(); err == nil {
		t.Fatal("Start after Close succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Database gives each caller an empty database of its own on one server.
func TestDatabaseIsolated(t *testing.T) {
	ctx := t.Context()
	a, b := open(t, Database(t)), open(t, Database(t))
	if _, err := a.ExecContext(ctx, "CREATE TABLE only_in_a (v int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRowContext(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("b sees a's table: %d, %v", n, err)
	}
	var dbA, dbB string
	_ = a.QueryRowContext(ctx, "SELECT current_database()").Scan(&dbA)
	_ = b.QueryRowContext(ctx, "SELECT current_database()").Scan(&dbB)
	if dbA == dbB || dbA == "" {
		t.Fatalf("databases %q and %q", dbA, dbB)
	}
	if shared.srv == nil {
		t.Fatal("no shared server")
	}
}

// A process that started a server and is killed (no cleanup runs) leaves
// neither the server nor its directory: the watchdog sees the process's
// end and removes both.
func TestWatchdogCleansUpAfterKill(t *testing.T) {
	if _, err := findBin(); err != nil {
		skipOrFail(t, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=start-and-hang")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("child said nothing")
	}
	var dir string
	var port, watchdog int
	if _, err := fmt.Sscanf(sc.Text(), "%s %d %d", &dir, &port, &watchdog); err != nil {
		t.Fatalf("child: %q: %v", sc.Text(), err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the child's server: %v", err)
	}
	c.Close()
	// Watch the watchdog's end through a pidfd (it is not our child).
	pidfd, err := unix.PidfdOpen(watchdog, 0)
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", watchdog, err)
	}
	defer unix.Close(pidfd)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatal("the watchdog did not exit within 30 s of the kill")
		}
		break
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("directory %s after the watchdog: %v", dir, err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("server on %s still up after the watchdog", addr)
	}
}

// The newest of Debian's versioned directories is preferred.
func TestVersionOrder(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/9.6/bin", 1},
		{"/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin", -1},
		{"/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/15/bin", 0},
	} {
		if got := slices.Compare(versionOf(c.a), versionOf(c.b)); got != c.want {
			t.Errorf("compare(%s, %s) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// recordingTB records whether Skip or Fatal ended the call.
type recordingTB struct {
	testing.TB
	ended string
}

func (r *recordingTB) Helper()               {}
func (r *recordingTB) Skip(...any)           { r.ended = "skip"; runtime.Goexit() }
func (r *recordingTB) Fatal(...any)          { r.ended = "fatal"; runtime.Goexit() }
func (r *recordingTB) Skipf(string, ...any)  { r.Skip() }
func (r *recordingTB) Fatalf(string, ...any) { r.Fatal() }

// Missing binaries skip a test, except in CI, where they fail it; any
// other error fails it.
func TestSkipOnlyOutsideCI(t *testing.T) {
	for _, c := range []struct {
		ci   string
		err  error
		want string
	}{
		{"", fmt.Errorf("%w: none here", ErrNoPostgres), "skip"},
		{"true", fmt.Errorf("%w: none here", ErrNoPostgres), "fatal"},
		{"", errors.New("initdb failed"), "fatal"},
	} {
		t.Setenv("CI", c.ci)
		r := &recordingTB{TB: t}
		done := make(chan struct{})
		go func() { defer close(done); skipOrFail(r, c.err) }()
		<-done
		if r.ended != c.want {
			t.Errorf("CI=%q, %v: %s, want %s", c.ci, c.err, r.ended, c.want)
		}
	}
}
