// Package pgtest starts throwaway PostgreSQL servers for tests, from the
// binaries of an installed PostgreSQL (Debian's postgresql package:
// /usr/lib/postgresql/<version>/bin), like [net/http/httptest] starts
// HTTP servers. It uses the standard library only: tests bring their own
// driver.
//
// [NewServer] runs initdb into a fresh directory and pg_ctl start on a free
// port of 127.0.0.1 (trust authentication, user "postgres", its Unix socket
// in the same directory), and stops the server and removes the directory
// in the test's cleanup. [Database] gives a test a database of its own on a
// server shared by the whole test binary, which is much quicker than a
// server per test. [StartServer] is the same for programs (examples) that
// have no [testing.TB].
//
// # Where the binaries come from
//
// initdb on PATH (with pg_ctl and createdb in the directory its symlinks
// lead to), else the newest /usr/lib/postgresql/*/bin. Without either,
// [NewServer] and [Database] skip the test with the reason, unless the
// environment variable CI is set (as .ci/run sets it): CI must not skip,
// so there they fail it.
//
// # Running as root
//
// PostgreSQL refuses to run as root. When the test runs as root, initdb and
// the server run as the user "nobody", in a directory under [os.TempDir]
// that nobody owns.
//
// # Cleanup when the test binary dies
//
// Every server has a watchdog: a shell, in a process group of its own, that
// waits for the test process to close its stdin and then stops the server
// (pg_ctl stop -m immediate) and removes its directory. A test binary that
// panics, times out or is killed leaves no server behind; the shared server
// of [Database] is stopped that way when the test binary exits.
package pgtest
