package pgtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// ErrNoPostgres: no PostgreSQL binaries were found (see the package doc).
var ErrNoPostgres = errors.New("pgtest: PostgreSQL binaries not found")

// User is the database superuser of every server (trust authentication).
const User = "postgres"

// Server is a PostgreSQL server in a directory of its own, listening on
// 127.0.0.1. It is a test server: trust authentication, no TLS.
type Server struct {
	bin  string              // directory holding initdb, pg_ctl, createdb
	dir  string              // data/, the socket, server.log
	port int                 // fixed for the server's life, across Stop and Start
	cred *syscall.Credential // the unprivileged user when run as root, else nil

	watchdog *exec.Cmd
	wdStdin  io.WriteCloser

	mu      sync.Mutex
	running bool
	closed  bool
	dbs     atomic.Int64 // names the databases of NewDatabase
}

// StartServer initializes and starts a server. Close it when done (a
// server whose process exits without Close is stopped by its watchdog).
//
// Errors: [ErrNoPostgres]; a failed initdb or pg_ctl start, with its
// output and the server's log.
func StartServer() (s *Server, err error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	s = &Server{bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = unprivileged(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, err
		}
		if err := reachable(s.dir); err != nil {
			return nil, err
		}
	}
	if err := s.startWatchdog(); err != nil {
		return nil, err
	}
	if out, err := s.run("initdb", "-D", s.data(), "-U", User, "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync"); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	conf := fmt.Sprintf("\n# pgtest\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = %s\n", confString(s.dir))
	if err := appendFile(filepath.Join(s.data(), "postgresql.conf"), conf); err != nil {
		return nil, err
	}
	// A free port can be taken between its choice and the server's bind:
	// try a few.
	for attempt := 0; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		if err = s.Start(); err == nil || attempt == 4 {
			return s, err
		}
	}
}

// NewServer starts a server of the test's own (see [StartServer]) and
// closes it on cleanup. Without PostgreSQL binaries it skips the test, or
// fails it when the environment variable CI is set.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartServer()
	if err != nil {
		skipOrFail(tb, err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Error(err)
		}
	})
	return s
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Database returns the URL of a new, empty database on the test binary's
// shared server, started on first use and stopped when the test binary
// exits (by its watchdog). Tests that stop or break their server use
// [NewServer] instead. Without PostgreSQL binaries it skips the test, or
// fails it when the environment variable CI is set.
func Database(tb testing.TB) string {
	tb.Helper()
	shared.once.Do(func() { shared.srv, shared.err = StartServer() })
	if shared.err != nil {
		skipOrFail(tb, shared.err)
	}
	dsn, err := shared.srv.NewDatabase()
	if err != nil {
		tb.Fatal(err)
	}
	return dsn
}

// Psql returns the path of psql, PostgreSQL's own client, from the
// binaries the servers run: for tests that run SQL as a user would.
// Without it it skips the test, or fails it when CI is set.
func Psql(tb testing.TB) string {
	tb.Helper()
	bin, err := findBin()
	if err == nil {
		p := filepath.Join(bin, "psql")
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	skipOrFail(tb, err)
	return ""
}

func skipOrFail(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, ErrNoPostgres) && os.Getenv("CI") == "" {
		tb.Skip(err)
	}
	tb.Fatal(err)
}

// DSN returns the URL of the server's "postgres" database, e.g.
// postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable.
func (s *Server) DSN() string { return s.dsn("postgres") }

func (s *Server) dsn(db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", User, s.port, db)
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// NewDatabase creates an empty database (createdb) and returns its URL.
func (s *Server) NewDatabase() (string, error) {
	name := fmt.Sprintf("test%d", s.dbs.Add(1))
	cmd := exec.Command(filepath.Join(s.bin, "createdb"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", User, name)
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pgtest: createdb %s: %w\n%s", name, err, out)
	}
	return s.dsn(name), nil
}

// Start starts the server again after [Server.Stop], on the same port and
// data. (StartServer and NewServer return a running server.)
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgtest: start: server closed")
	}
	if s.running {
		return nil
	}
	out, err := s.run("pg_ctl", "-D", s.data(), "-l", s.logFile(), "-w", "-t", "30",
		"-o", "-p "+strconv.Itoa(s.port), "start")
	if err != nil {
		return fmt.Errorf("pgtest: pg_ctl start on port %d: %w\n%s\nserver log:\n%s", s.port, err, out, s.logTail())
	}
	s.running = true
	return nil
}

// Stop stops the server at once (pg_ctl stop -m immediate: like a crash;
// committed transactions survive, the next Start recovers), keeping its
// data. Connections fail until [Server.Start].
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stop()
}

func (s *Server) stop() error {
	if !s.running {
		return nil
	}
	if out, err := s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pgtest: pg_ctl stop: %w\n%s", err, out)
	}
	s.running = false
	return nil
}

// Close stops the server and removes its directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	err := s.stop()
	if s.watchdog != nil {
		_ = s.wdStdin.Close() // the watchdog stops what is left and removes the directory
		_ = s.watchdog.Wait()
	}
	if s.dir != "" {
		if rmErr := os.RemoveAll(s.dir); rmErr != nil && err == nil {
			err = rmErr
		}
	}
	return err
}

// Log returns the server's log so far.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.logFile())
	return string(b)
}

func (s *Server) data() string    { return filepath.Join(s.dir, "data") }
func (s *Server) logFile() string { return filepath.Join(s.dir, "server.log") }

func (s *Server) logTail() string {
	l := s.Log()
	if len(l) > 4000 {
		l = "…" + l[len(l)-4000:]
	}
	return l
}

// run runs one of the binaries as the server's user and returns its
// output.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Env = cleanEnv()
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.Bytes(), err
}

// startWatchdog starts the shell that, once the test process closes its
// stdin (Close, or the process's exit), stops the server and removes its
// directory. It runs in a process group of its own, so that a Ctrl-C
// meant for the test does not kill it first, and with no output, so that
// `go test` does not wait for it.
func (s *Server) startWatchdog() error {
	cmd := exec.Command("/bin/sh", "-c", `read _; "$1" -D "$2" -m immediate -w stop; rm -rf "$3"`,
		"pgtest-watchdog", filepath.Join(s.bin, "pg_ctl"), s.data(), s.dir)
	cmd.Dir = "/"
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start watchdog: %w", err)
	}
	s.watchdog, s.wdStdin = cmd, stdin
	return nil
}

// findBin returns the directory of initdb, pg_ctl and createdb.
func findBin() (string, error) {
	tools := []string{"initdb", "pg_ctl", "createdb", "postgres"}
	has := func(dir string) bool {
		for _, t := range tools {
			if fi, err := os.Stat(filepath.Join(dir, t)); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if d := filepath.Dir(p); has(d) {
			return d, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return slices.Compare(versionOf(b), versionOf(a)) }) // newest first
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w: no %s on PATH or in /usr/lib/postgresql/*/bin (install the postgresql package)",
		ErrNoPostgres, strings.Join(tools, ", "))
}

// versionOf parses the version in /usr/lib/postgresql/<version>/bin
// ("15", "9.6").
func versionOf(binDir string) []int {
	var v []int
	for _, f := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

// unprivileged returns the credential of the user "nobody".
func unprivileged() (*syscall.Credential, error) {
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, PostgreSQL needs an unprivileged user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtest: user nobody: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reachable checks that every parent of dir lets others through, so that
// the unprivileged user can reach the directory it owns.
func reachable(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgtest: %s is not searchable by others, so the server's user cannot reach %s: set TMPDIR", d, dir)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// confString quotes s for postgresql.conf.
func confString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}

func appendFile(name, text string) error {
	f, err := os.OpenFile(name, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}

// cleanEnv is the environment without the PG* variables that would point
// the tools elsewhere.
func cleanEnv() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
}
