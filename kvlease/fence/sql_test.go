package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/fence/pgtest"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// openDB opens dsn with the pgx driver, closed on cleanup.
func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqlFence opens a database of the test's own on the shared server, with
// the fence's table and an account table the tests guard.
func sqlFence(t *testing.T) (*sql.DB, *fence.SQL) {
	t.Helper()
	db := openDB(t, pgtest.Database(t))
	return db, createFence(t, db)
}

func createFence(t *testing.T, db *sql.DB) *fence.SQL {
	t.Helper()
	f, err := fence.NewSQL(fence.DefaultSQLTable)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	mustExec(t, db, "CREATE TABLE IF NOT EXISTS account (id text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)")
	return f
}

func mustExec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// fencedWrite is the pattern users follow: in one transaction, Check and
// then the guarded write; commit only if both succeed.
func fencedWrite(ctx context.Context, db *sql.DB, f *fence.SQL, opts *sql.TxOptions, id string, token kvlease.Token, value string) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := f.Check(ctx, tx, id, token); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO account (id, value, token) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`, id, value, int64(token)); err != nil {
		return err
	}
	return tx.Commit()
}

// account returns what the guarded table holds for id.
func account(t *testing.T, db *sql.DB, id string) (value string, token kvlease.Token) {
	t.Helper()
	var tok int64
	err := db.QueryRowContext(t.Context(), "SELECT value, token FROM account WHERE id = $1", id).Scan(&value, &tok)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		t.Fatal(err)
	}
	return value, kvlease.Token(tok)
}

func highest(t *testing.T, db *sql.DB, f *fence.SQL, resource string) kvlease.Token {
	t.Helper()
	h, err := f.Highest(t.Context(), db, resource)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The SQL fence accepts equal and higher tokens, refuses lower ones with
// the same typed error as the other fences (counted, and in the metrics),
// and the guarded table follows the accepted writes only.
func TestSQLFenceTokens(t *testing.T) {
	db, f := sqlFence(t)
	reader := sdkmetric.NewManualReader()
	m, err := telemetry.NewMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	if err != nil {
		t.Fatal(err)
	}
	f.Metrics = m
	const res = "account-42"
	steps := []struct {
		name    string
		token   kvlease.Token
		stale   bool
		highest kvlease.Token
	}{
		{"first token", 5, false, 5},
		{"equal token", 5, false, 5},
		{"higher token", 7, false, 7},
		{"lower token", 6, true, 7},
		{"much lower token", 1, true, 7},
		{"equal again", 7, false, 7},
		{"largest bigint", math.MaxInt64, false, math.MaxInt64},
		{"below the largest", math.MaxInt64 - 1, true, math.MaxInt64},
	}
	rejected := int64(0)
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before, beforeTok := account(t, db, res)
			err := fencedWrite(t.Context(), db, f, nil, res, s.token, s.name)
			value, tok := account(t, db, res)
			if s.stale {
				rejected++
				var se *fence.StaleTokenError
				if !errors.As(err, &se) || !errors.Is(err, fence.ErrStaleToken) {
					t.Fatalf("write(%d) = %v, want *StaleTokenError", s.token, err)
				}
				if se.Token != s.token || se.Highest != s.highest || se.Resource != res {
					t.Errorf("StaleTokenError = %+v, want token %d highest %d resource %q", *se, s.token, s.highest, res)
				}
				if errors.Is(err, fence.ErrDatabase) {
					t.Errorf("a refusal matches ErrDatabase: %v", err)
				}
				if value != before || tok != beforeTok {
					t.Errorf("account = %q (token %d) after a refused write, want %q (token %d)", value, tok, before, beforeTok)
				}
			} else {
				if err != nil {
					t.Fatalf("write(%d) = %v, want nil", s.token, err)
				}
				if value != s.name || tok != s.token {
					t.Errorf("account = %q (token %d), want %q (token %d)", value, tok, s.name, s.token)
				}
			}
			if h := highest(t, db, f, res); h != s.highest {
				t.Errorf("Highest = %d, want %d", h, s.highest)
			}
			if n := f.Rejected(); n != rejected {
				t.Errorf("Rejected() = %d, want %d", n, rejected)
			}
		})
	}
	if n := telemetrytest.Sum(t, reader, "leased.fence.rejections"); n != rejected {
		t.Errorf("fence rejections metric %d, want %d", n, rejected)
	}
	// A high token on one resource says nothing about another.
	if err := fencedWrite(t.Context(), db, f, nil, "account-43", 1, "other"); err != nil {
		t.Fatalf("another resource: %v", err)
	}
	if h := highest(t, db, f, "account-44"); h != 0 {
		t.Errorf("Highest of an unknown resource = %d, want 0", h)
	}
}

// A caller that ignores Check's refusal and goes on to write and commit
// committed its stale write: the refusal left the transaction open and
// usable (found by an outside client; the plain-SQL function of
// docs/fencing.md fails closed, with an exception). A refusal now aborts
// the transaction: its later statements fail and its Commit rolls back.
func TestSQLRefusalAbortsTheTransaction(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	const res = "account-7"
	if err := fencedWrite(ctx, db, f, nil, res, 9, "newer"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := f.Check(ctx, tx, res, 3); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("Check(3) after 9: %v; want ErrStaleToken", err)
	}
	_, werr := tx.ExecContext(ctx, "UPDATE account SET value = 'stale', token = 3 WHERE id = $1", res)
	cerr := tx.Commit()
	if werr == nil {
		t.Errorf("a write after the refusal, in its transaction, succeeded; want it refused")
	}
	if cerr == nil {
		t.Errorf("Commit after the refusal: nil; want an error (the transaction rolled back)")
	}
	if value, tok := account(t, db, res); value != "newer" || tok != 9 {
		t.Fatalf("account = %q (token %d) after a stale holder committed in spite of the refusal; want %q (token 9)", value, tok, "newer")
	}
}

// A rolled-back transaction raises nothing, even after its Check and
// guarded write succeeded: a lower token than the rolled-back one is
// accepted afterwards.
func TestSQLRollbackRaisesNothing(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	if err := fencedWrite(ctx, db, f, nil, "r", 10, "ten"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx, tx, "r", 20); err != nil {
		t.Fatal(err)
	}
	if h, err := f.Highest(ctx, tx, "r"); err != nil || h != 20 {
		t.Fatalf("Highest inside the transaction = %d, %v; want 20", h, err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE account SET value = 'twenty', token = 20 WHERE id = 'r'"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if h := highest(t, db, f, "r"); h != 10 {
		t.Fatalf("Highest = %d after a rollback, want 10", h)
	}
	if err := fencedWrite(ctx, db, f, nil, "r", 15, "fifteen"); err != nil {
		t.Fatalf("token 15 after a rolled-back 20: %v", err)
	}
	if v, tok := account(t, db, "r"); v != "fifteen" || tok != 15 {
		t.Fatalf("account = %q (token %d), want fifteen (15)", v, tok)
	}
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0", n)
	}
}

// waitLockWait waits until the backend pid waits for a lock (the
// condition, read from pg_stat_activity; PostgreSQL has no event for it).
func waitLockWait(t *testing.T, db *sql.DB, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		var wait sql.NullString
		if err := db.QueryRowContext(t.Context(), "SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1", pid).Scan(&wait); err != nil {
			t.Fatal(err)
		}
		if wait.String == "Lock" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never waited for a lock (wait_event_type %q)", pid, wait.String)
		}
		time.Sleep(pause)
	}
}

// beginWithPID begins a transaction and returns its backend's pid.
func beginWithPID(t *testing.T, db *sql.DB, opts *sql.TxOptions) (*sql.Tx, int) {
	t.Helper()
	tx, err := db.BeginTx(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	var pid int
	if err := tx.QueryRowContext(t.Context(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return tx, pid
}

// Under READ COMMITTED a Check on a resource another transaction has
// checked waits for that transaction, then decides on what it committed:
// refused if it committed a higher token, accepted if it rolled back.
func TestSQLCheckWaitsForHolder(t *testing.T) {
	for _, c := range []struct {
		name   string
		commit bool
	}{{"holder commits", true}, {"holder rolls back", false}} {
		t.Run(c.name, func(t *testing.T) {
			db, f := sqlFence(t)
			ctx := t.Context()
			if err := fencedWrite(ctx, db, f, nil, "r", 3, "three"); err != nil {
				t.Fatal(err)
			}
			holder, _ := beginWithPID(t, db, nil)
			if err := f.Check(ctx, holder, "r", 10); err != nil {
				t.Fatal(err)
			}
			late, latePID := beginWithPID(t, db, nil)
			checked := make(chan error, 1)
			go func() { checked <- f.Check(ctx, late, "r", 5) }()
			waitLockWait(t, db, latePID) // blocked on the holder's row lock
			select {
			case err := <-checked:
				t.Fatalf("Check returned %v while the holder's transaction was open", err)
			default:
			}
			end := holder.Rollback
			if c.commit {
				end = holder.Commit
			}
			if err := end(); err != nil {
				t.Fatal(err)
			}
			err := <-checked
			if c.commit {
				var se *fence.StaleTokenError
				if !errors.As(err, &se) || se.Highest != 10 {
					t.Fatalf("Check(5) after a committed 10 = %v, want stale with highest 10", err)
				}
				_ = late.Rollback()
				if h := highest(t, db, f, "r"); h != 10 {
					t.Fatalf("Highest = %d, want 10", h)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check(5) after a rolled-back 10 = %v, want nil", err)
			}
			if err := late.Commit(); err != nil {
				t.Fatal(err)
			}
			if h := highest(t, db, f, "r"); h != 5 {
				t.Fatalf("Highest = %d, want 5", h)
			}
		})
	}
}

// Under SERIALIZABLE (and REPEATABLE READ) a Check whose snapshot predates
// a committed raise fails with a serialization failure, even for a higher
// token: the typed error says to retry, and the retry succeeds.
func TestSQLSerializationFailure(t *testing.T) {
	for _, level := range []sql.IsolationLevel{sql.LevelRepeatableRead, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) {
			db, f := sqlFence(t)
			ctx := t.Context()
			opts := &sql.TxOptions{Isolation: level}
			for _, res := range []string{"existing", "new"} {
				if res == "existing" {
					if err := fencedWrite(ctx, db, f, nil, res, 1, "one"); err != nil {
						t.Fatal(err)
					}
				}
				late, _ := beginWithPID(t, db, opts) // its snapshot is taken here
				if err := fencedWrite(ctx, db, f, opts, res, 10, "ten"); err != nil {
					t.Fatal(err)
				}
				err := f.Check(ctx, late, res, 12)
				var de *fence.DatabaseError
				if !errors.Is(err, fence.ErrSerialization) || !errors.Is(err, fence.ErrDatabase) || !fence.Retryable(err) ||
					!errors.As(err, &de) || de.SQLState != "40001" || de.Resource != res {
					t.Fatalf("%s: Check in a transaction older than the raise = %v, want a serialization failure (40001)", res, err)
				}
				_ = late.Rollback()
				if h := highest(t, db, f, res); h != 10 {
					t.Fatalf("%s: Highest = %d after the failed transaction, want 10", res, h)
				}
				if err := fencedWrite(ctx, db, f, opts, res, 12, "twelve"); err != nil {
					t.Fatalf("%s: the retry: %v", res, err)
				}
				if v, tok := account(t, db, res); v != "twelve" || tok != 12 {
					t.Fatalf("%s: account = %q (token %d), want twelve (12)", res, v, tok)
				}
			}
		})
	}
}

// Two transactions that check two resources in opposite orders deadlock;
// PostgreSQL aborts one (40P01), which the fence reports as retryable.
func TestSQLDeadlockRetryable(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	a, _ := beginWithPID(t, db, nil)
	b, _ := beginWithPID(t, db, nil)
	for _, tx := range []*sql.Tx{a, b} {
		if _, err := tx.ExecContext(ctx, "SET LOCAL deadlock_timeout = '50ms'"); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Check(ctx, a, "x", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx, b, "y", 1); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- f.Check(ctx, a, "y", 1) }()
	go func() { errs <- f.Check(ctx, b, "x", 1) }()
	// One is aborted (its locks released); the other then gets the lock.
	var deadlocked, survived int
	for range 2 {
		err := <-errs
		var de *fence.DatabaseError
		switch {
		case err == nil:
			survived++
		case errors.Is(err, fence.ErrSerialization) && fence.Retryable(err) && errors.As(err, &de) && de.SQLState == "40P01":
			deadlocked++
		default:
			t.Fatalf("Check: %v, want nil or a deadlock (40P01)", err)
		}
	}
	if deadlocked != 1 || survived != 1 {
		t.Fatalf("%d deadlocked, %d survived; want 1 and 1", deadlocked, survived)
	}
}

// Bad input: each a typed error, nothing sent, nothing written (the
// transaction stays usable and commits nothing).
func TestSQLBadInput(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	for _, c := range []struct {
		name     string
		resource string
		token    kvlease.Token
		want     error
	}{
		{"token 0", "r", 0, fence.ErrInvalidToken},
		{"token above bigint", "r", math.MaxInt64 + 1, fence.ErrInvalidToken},
		{"largest uint64 token", "r", math.MaxUint64, fence.ErrInvalidToken},
		{"empty resource", "", 1, fence.ErrInvalidResource},
		{"256-byte resource", strings.Repeat("r", 256), 1, fence.ErrInvalidResource},
		{"invalid UTF-8", "r\xff", 1, fence.ErrInvalidResource},
		{"NUL byte", "r\x00s", 1, fence.ErrInvalidResource},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			err = f.Check(ctx, tx, c.resource, c.token)
			if !errors.Is(err, c.want) || errors.Is(err, fence.ErrDatabase) {
				t.Fatalf("Check(%q, %d) = %v, want %v", c.resource, c.token, err, c.want)
			}
			// The transaction is intact: nothing was sent, so it can commit
			// (and commits nothing).
			if err := tx.Commit(); err != nil {
				t.Fatalf("commit after a refused input: %v", err)
			}
			var n int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+f.Table()).Scan(&n); err != nil || n != 0 {
				t.Fatalf("fence table holds %d rows (%v), want 0", n, err)
			}
			if _, err := f.Highest(ctx, db, c.resource); c.want == fence.ErrInvalidResource && !errors.Is(err, c.want) {
				t.Fatalf("Highest(%q) = %v, want %v", c.resource, err, c.want)
			}
		})
	}
	// The longest resource the fence takes fits its column.
	long := strings.Repeat("é", fence.MaxSQLResource/2) // 254 bytes
	if err := fencedWrite(ctx, db, f, nil, long, 1, "long"); err != nil {
		t.Fatalf("a %d-byte resource: %v", len(long), err)
	}
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0 (bad input is not a refusal)", n)
	}
}

// A nil, committed or rolled-back transaction: sql.ErrTxDone, nothing
// written.
func TestSQLTxDone(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	done := func(commit bool) *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	for _, c := range []struct {
		name string
		tx   *sql.Tx
	}{{"nil", nil}, {"committed", done(true)}, {"rolled back", done(false)}} {
		t.Run(c.name, func(t *testing.T) {
			if err := f.Check(ctx, c.tx, "r", 1); !errors.Is(err, sql.ErrTxDone) {
				t.Fatalf("Check = %v, want sql.ErrTxDone", err)
			}
			if h := highest(t, db, f, "r"); h != 0 {
				t.Fatalf("Highest = %d, want 0", h)
			}
		})
	}
}

// A transaction that already failed (aborted by an error, not yet rolled
// back): ErrDatabase with the driver's SQLSTATE, and nothing written.
func TestSQLAbortedTransaction(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("1/0 succeeded")
	}
	err = f.Check(ctx, tx, "r", 1)
	var de *fence.DatabaseError
	var withState interface{ SQLState() string }
	if !errors.Is(err, fence.ErrDatabase) || errors.Is(err, fence.ErrSerialization) || fence.Retryable(err) ||
		!errors.As(err, &de) || de.SQLState != "25P02" || !errors.As(err, &withState) {
		t.Fatalf("Check in an aborted transaction = %v, want ErrDatabase with SQLSTATE 25P02 (in_failed_sql_transaction)", err)
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("an aborted transaction committed")
	}
	if h := highest(t, db, f, "r"); h != 0 {
		t.Fatalf("Highest = %d, want 0", h)
	}
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0", n)
	}
}

// The database goes away under an open transaction, or was never there:
// ErrDatabase, the driver's error reachable, and nothing written (seen
// once the server is back).
func TestSQLDatabaseUnreachable(t *testing.T) {
	srv := pgtest.NewServer(t)
	db := openDB(t, srv.DSN())
	f := createFence(t, db)
	ctx := t.Context()
	if err := fencedWrite(ctx, db, f, nil, "r", 5, "five"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	err = f.Check(ctx, tx, "r", 9)
	var de *fence.DatabaseError
	if !errors.Is(err, fence.ErrDatabase) || fence.Retryable(err) || !errors.As(err, &de) || de.Err == nil || de.Op != "check" {
		t.Fatalf("Check with the server stopped = %v, want ErrDatabase", err)
	}
	t.Logf("server stopped: %v", err)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0) // drop the pool's dead connections
	if h := highest(t, db, f, "r"); h != 5 {
		t.Fatalf("Highest = %d after the restart, want 5 (the failed check raised nothing)", h)
	}

	// A closed port: nothing listens.
	down := pgtest.NewServer(t)
	closed := openDB(t, down.DSN())
	if err := down.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = f.Highest(ctx, closed, "r")
	var refused *net.OpError // the driver's error, reachable through the fence's
	if !errors.Is(err, fence.ErrDatabase) || !errors.As(err, &de) || de.Op != "read" || !errors.As(err, &refused) {
		t.Fatalf("Highest on a closed port = %v, want ErrDatabase wrapping the dial's *net.OpError", err)
	}
	if err := f.CreateTable(ctx, closed); !errors.Is(err, fence.ErrDatabase) {
		t.Fatalf("CreateTable on a closed port = %v, want ErrDatabase", err)
	}
	if n := f.Rejected(); n != 0 {
		t.Errorf("Rejected() = %d, want 0", n)
	}
}

// A cancelled context: ErrDatabase, with the context's error reachable.
func TestSQLCancelled(t *testing.T) {
	db, f := sqlFence(t)
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.Check(ctx, tx, "r", 1); !errors.Is(err, fence.ErrDatabase) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Check with a cancelled context = %v, want ErrDatabase and context.Canceled", err)
	}
	if h := highest(t, db, f, "r"); h != 0 {
		t.Fatalf("Highest = %d, want 0", h)
	}
}

// Table names: plain identifiers only, optionally schema-qualified; a
// schema-qualified fence works.
func TestNewSQLTable(t *testing.T) {
	for _, name := range []string{"leased_fence", "Fence2", "_f", "s.fence", strings.Repeat("a", 63)} {
		if _, err := fence.NewSQL(name); err != nil {
			t.Errorf("NewSQL(%q) = %v", name, err)
		}
	}
	for _, name := range []string{"", "2fence", "fence-table", "a.b.c", ".f", "f.", `"f"`, "f; DROP TABLE x", "fence table",
		strings.Repeat("a", 64), "é"} {
		if f, err := fence.NewSQL(name); !errors.Is(err, kvlease.ErrInvalidOption) || f != nil {
			t.Errorf("NewSQL(%q) = %v, %v; want ErrInvalidOption", name, f, err)
		}
	}
	db := openDB(t, pgtest.Database(t))
	// A reserved word names a table like any other (it was a syntax error
	// in every statement; found by an outside client).
	user, err := fence.NewSQL("user")
	if err != nil {
		t.Fatal(err)
	}
	if err := user.CreateTable(t.Context(), db); err != nil {
		t.Fatalf("CreateTable of a fence named user: %v", err)
	}
	// A table of another shape is refused, not used: a text token column
	// compares "10" <= "9".
	mustExec(t, db, "CREATE TABLE textual (resource text PRIMARY KEY, token text NOT NULL)")
	mustExec(t, db, "CREATE TABLE unkeyed (resource text, token bigint NOT NULL)")
	for _, name := range []string{"textual", "unkeyed", "pg_catalog.pg_class"} {
		f, err := fence.NewSQL(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.CreateTable(t.Context(), db); !errors.Is(err, kvlease.ErrInvalidOption) {
			t.Errorf("CreateTable on %s: %v, want ErrInvalidOption", name, err)
		}
	}
	mustExec(t, db, "CREATE SCHEMA app")
	f, err := fence.NewSQL("app.Fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTable(t.Context(), db); err != nil {
		t.Fatalf("second CreateTable: %v", err)
	}
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := f.Check(t.Context(), tx, "r", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var tok int64
	if err := db.QueryRowContext(t.Context(), "SELECT token FROM app.fence WHERE resource = 'r'").Scan(&tok); err != nil || tok != 2 {
		t.Fatalf("app.fence: %d, %v", tok, err)
	}
}

// CreateTable refuses an UNLOGGED fence table (and a TEMPORARY one): a
// crash of the server empties an unlogged table, and a missing row
// accepts any token, so a stale holder's write was accepted after a
// restart (found by an outside client, whose hand-made table CreateTable
// had accepted).
func TestSQLCreateTableRefusesAnUnloggedTable(t *testing.T) {
	srv := pgtest.NewServer(t)
	db := openDB(t, srv.DSN())
	ctx := t.Context()
	mustExec(t, db, "CREATE UNLOGGED TABLE leased_fence (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))")
	f, err := fence.NewSQL(fence.DefaultSQLTable)
	if err != nil {
		t.Fatal(err)
	}
	err = f.CreateTable(ctx, db)
	if !errors.Is(err, kvlease.ErrInvalidOption) || !strings.Contains(err.Error(), "UNLOGGED") {
		t.Errorf("CreateTable on an UNLOGGED table = %v, want ErrInvalidOption naming UNLOGGED", err)
	}

	// Why: used anyway, the fence forgets its tokens in a crash.
	mustExec(t, db, "CREATE TABLE account (id text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)")
	if err := fencedWrite(ctx, db, f, nil, "r", 100, "new"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil { // -m immediate: a crash
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(0) // drop the pool's dead connections
	if err := fencedWrite(ctx, db, f, nil, "r", 5, "stale"); err != nil {
		t.Logf("after the crash: %v", err)
	} else if v, _ := account(t, db, "r"); v == "stale" {
		t.Logf("after the crash the unlogged fence accepted token 5 after 100 (account = %q): hence the refusal", v)
	}

	// A TEMPORARY table is one session's own: refused too (one
	// connection, so that CreateTable's statements run in the session
	// that made it).
	one := openDB(t, srv.DSN())
	one.SetMaxOpenConns(1)
	mustExec(t, one, "CREATE TEMPORARY TABLE tmp_fence (resource text PRIMARY KEY, token bigint NOT NULL)")
	tmp, err := fence.NewSQL("tmp_fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := tmp.CreateTable(ctx, one); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("CreateTable on a TEMPORARY table = %v, want ErrInvalidOption", err)
	}
}

// First CreateTable calls racing on a new database all succeed: one
// creates the table, the others find it. Besides the races it knew
// (23505, 42P07), one lost with 42710, "type … already exists" (the
// table's row type committed after it looked for the table), and failed
// (found in review: in 2 or more of these 30 rounds, every run).
func TestSQLCreateTableRace(t *testing.T) {
	db := openDB(t, pgtest.Database(t))
	const rounds, callers = 30, 8
	// A connection of its own for every statement: their set-up spreads
	// the calls over the few milliseconds the races need.
	db.SetMaxIdleConns(-1)
	for i := range rounds {
		f, err := fence.NewSQL(fmt.Sprintf("fence_%d", i))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				if err := f.CreateTable(t.Context(), db); err != nil {
					t.Errorf("round %d: %v", i, err)
				}
			})
		}
		wg.Wait()
	}
}

// An application role that may use the fence's table but not create
// tables (PostgreSQL 15 and later: any role but the owner, in a new
// database's public schema) can call CreateTable on the table its
// migrations made: it checks the shape, and creates nothing. CREATE TABLE
// IF NOT EXISTS checks the schema's CREATE privilege first, and refused it
// (found in review).
func TestSQLCreateTableAsApplicationRole(t *testing.T) {
	dsn := pgtest.Database(t)
	owner := openDB(t, dsn)
	f := createFence(t, owner)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	role := "app_" + strings.TrimPrefix(u.Path, "/") // roles are the server's: one per database
	mustExec(t, owner, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { _, _ = owner.ExecContext(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role) })
	mustExec(t, owner, "GRANT SELECT, INSERT, UPDATE ON leased_fence, account TO "+role)
	mustExec(t, owner, "CREATE TABLE textual (resource text PRIMARY KEY, token text NOT NULL)")
	mustExec(t, owner, "GRANT SELECT, INSERT, UPDATE ON textual TO "+role)
	u.User = url.User(role)
	app := openDB(t, u.String())

	if err := f.CreateTable(t.Context(), app); err != nil {
		t.Fatalf("CreateTable as %s, on the table that exists: %v", role, err)
	}
	if err := fencedWrite(t.Context(), app, f, nil, "r", 5, "app"); err != nil {
		t.Fatalf("fenced write as %s: %v", role, err)
	}
	if err := fencedWrite(t.Context(), app, f, nil, "r", 4, "late"); !errors.Is(err, fence.ErrStaleToken) {
		t.Fatalf("stale fenced write as %s: %v, want ErrStaleToken", role, err)
	}
	// The shape is still checked, and a missing table is still an error
	// (the role may not create it).
	textual, err := fence.NewSQL("textual")
	if err != nil {
		t.Fatal(err)
	}
	if err := textual.CreateTable(t.Context(), app); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Errorf("CreateTable as %s on a text token column: %v, want ErrInvalidOption", role, err)
	}
	missing, err := fence.NewSQL("missing")
	if err != nil {
		t.Fatal(err)
	}
	var dbErr *fence.DatabaseError
	if err := missing.CreateTable(t.Context(), app); !errors.As(err, &dbErr) || dbErr.SQLState != "42501" {
		t.Errorf("CreateTable as %s of a table it may not create: %v, want ErrDatabase with SQLSTATE 42501", role, err)
	}
}

// The one-statement form docs/fencing.md gives for a table of the user's
// own, run with psql as written: a stale token updates no row. (The doc
// wrote it with placeholders no client takes, $balance, a syntax error
// pasted into psql, and the test ran a statement of its own; found in
// review.)
func TestSQLDocumentedStatement(t *testing.T) {
	once, each := docBlock(t, "### A table of your own")
	dsn := pgtest.Database(t)
	db := openDB(t, dsn)
	ctx := t.Context()
	mustExec(t, db, "CREATE TABLE account (id bigint PRIMARY KEY, balance bigint NOT NULL)")
	mustExec(t, db, "INSERT INTO account VALUES (42, 100)")
	psql := pgtest.Psql(t)
	run := func(script string, vars ...string) string {
		t.Helper()
		f := filepath.Join(t.TempDir(), "statement.sql")
		if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"-X", "-v", "ON_ERROR_STOP=1"}
		for _, v := range vars {
			args = append(args, "-v", v)
		}
		out, err := exec.Command(psql, append(args, "-f", f, dsn)...).CombinedOutput()
		if err != nil {
			t.Fatalf("psql %v: %v\n%s", vars, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if out := run(once); out != "ALTER TABLE" {
		t.Fatalf("the doc's ALTER TABLE: %q", out)
	}
	for _, s := range []struct {
		token, balance int
		says           string
	}{{0, 150, "UPDATE 0"}, {5, 200, "UPDATE 1"}, {5, 210, "UPDATE 1"}, {7, 300, "UPDATE 1"}, {6, 250, "UPDATE 0"}, {0, 350, "UPDATE 0"}} {
		if out := run(each, fmt.Sprintf("token=%d", s.token), fmt.Sprintf("balance=%d", s.balance), "id=42"); out != s.says {
			t.Errorf("the doc's UPDATE with token %d: %q, want %q", s.token, out, s.says)
		}
	}
	var balance, last int64
	if err := db.QueryRowContext(ctx, "SELECT balance, last_token FROM account WHERE id = 42").Scan(&balance, &last); err != nil ||
		balance != 300 || last != 7 {
		t.Fatalf("account 42: balance %d, last_token %d, %v; want 300, 7", balance, last, err)
	}
}

// docBlock returns the two parts, split at a blank line, of the first sql
// block under heading in docs/fencing.md.
func docBlock(t *testing.T, heading string) (first, second string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), heading)
	_, block, ok := strings.Cut(section, "```sql\n")
	block, _, ok2 := strings.Cut(block, "```")
	first, second, ok3 := strings.Cut(strings.TrimSpace(block), "\n\n")
	if !ok || !ok2 || !ok3 || strings.Contains(second, "\n\n") {
		t.Fatalf("docs/fencing.md: under %q, want an sql block of two parts, got %q", heading, block)
	}
	return first, second
}

// A holder that stalls inside its transaction, after its Check, holds up
// its successor only until PostgreSQL ends the idle session
// (idle_in_transaction_session_timeout, as the doc advises); the
// successor's token is then accepted and the stalled commit fails.
func TestSQLStalledHolderTimedOut(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	stalled, _ := beginWithPID(t, db, nil)
	if _, err := stalled.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = '300ms'"); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx, stalled, "r", 5); err != nil {
		t.Fatal(err)
	}
	// The stalled holder sends nothing more; its successor checks.
	if err := fencedWrite(ctx, db, f, nil, "r", 7, "successor"); err != nil {
		t.Fatalf("successor: %v", err)
	}
	if _, err := stalled.ExecContext(ctx, "UPDATE account SET value = 'stalled' WHERE id = 'r'"); err == nil {
		t.Fatal("the stalled holder's session outlived its timeout")
	}
	if err := stalled.Commit(); err == nil {
		t.Fatal("the stalled holder committed")
	}
	if v, tok := account(t, db, "r"); v != "successor" || tok != 7 {
		t.Fatalf("account = %q (token %d), want the successor's (7)", v, tok)
	}
	if h := highest(t, db, f, "r"); h != 7 {
		t.Fatalf("Highest = %d, want 7", h)
	}
}

// The psql script of docs/fencing.md ("Without Go"), run with psql as
// written: an older token's write is rolled back, not committed (the bare
// INSERT … RETURNING the doc showed before refused by returning no row,
// and a script's write went through: found by an outside client), and so
// is a token of 0. psql runs as a user's would, reading a ~/.psqlrc, one
// that sets ON_ERROR_ROLLBACK on: psql then rolled back to a savepoint
// after the check's error, the transaction was no longer aborted, and the
// older token's write committed (found by an outside client).
func TestSQLDocumentedScript(t *testing.T) {
	doc, err := os.ReadFile("../../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "### Without Go")
	_, block, ok := strings.Cut(section, "```sql\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal(`docs/fencing.md: no sql block under "Without Go"`)
	}
	script := filepath.Join(t.TempDir(), "fence.sql")
	if err := os.WriteFile(script, []byte(block), 0o644); err != nil {
		t.Fatal(err)
	}
	dsn := pgtest.Database(t)
	db := openDB(t, dsn)
	mustExec(t, db, "CREATE TABLE account (id bigint PRIMARY KEY, balance bigint NOT NULL)")
	mustExec(t, db, "INSERT INTO account VALUES (42, 100)")
	psql := pgtest.Psql(t)
	psqlrc := filepath.Join(t.TempDir(), "psqlrc")
	if err := os.WriteFile(psqlrc, []byte("\\set ON_ERROR_ROLLBACK on\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// runScript runs the script as a user would, with psqlrc as the
	// user's ~/.psqlrc, and returns psql's output and exit code (3:
	// ON_ERROR_STOP's, the script stopped at an error).
	runScript := func(dsn string, token, balance int) ([]byte, int) {
		t.Helper()
		cmd := exec.Command(psql, "-q", "-v", fmt.Sprintf("token=%d", token),
			"-v", fmt.Sprintf("balance=%d", balance), "-f", script, dsn)
		cmd.Env = append(os.Environ(), "PSQLRC="+psqlrc)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("psql with token %d: %v\n%s", token, err, out)
		}
		return out, cmd.ProcessState.ExitCode()
	}
	for _, run := range []struct {
		token, balance int
		want           int64  // the balance after
		says           string // in psql's output
	}{
		{20, 200, 200, ""},
		{10, 300, 200, "is stale"},
		{20, 210, 210, ""},
		{0, 400, 210, "violates check constraint"},
	} {
		out, code := runScript(dsn, run.token, run.balance)
		var balance int64
		if err := db.QueryRowContext(t.Context(), "SELECT balance FROM account WHERE id = 42").Scan(&balance); err != nil {
			t.Fatal(err)
		}
		wantCode := 0
		if run.says != "" {
			wantCode = 3
		}
		if balance != run.want || code != wantCode || (run.says == "") != !strings.Contains(string(out), "ERROR") ||
			!strings.Contains(string(out), run.says) {
			t.Errorf("psql with token %d, balance %d: balance now %d, want %d; exit %d, want %d; output:\n%s",
				run.token, run.balance, balance, run.want, code, wantCode, out)
		}
	}
	// A table of that name made by hand with a text token column, which
	// the script's CREATE TABLE IF NOT EXISTS leaves alone: tokens still
	// compare as numbers (as text, 9 came after 10), and a resource
	// fence.SQL would refuse is refused here too.
	dsn2 := pgtest.Database(t)
	db2 := openDB(t, dsn2)
	mustExec(t, db2, "CREATE TABLE leased_fence (resource text PRIMARY KEY, token text NOT NULL)")
	mustExec(t, db2, "CREATE TABLE account (id bigint PRIMARY KEY, balance bigint NOT NULL)")
	mustExec(t, db2, "INSERT INTO account VALUES (42, 100)")
	for _, run := range []struct {
		token int
		says  string
	}{{10, ""}, {9, "is stale"}} {
		out, code := runScript(dsn2, run.token, 1)
		if (code == 0) != (run.says == "") || (run.says == "") != !strings.Contains(string(out), "ERROR") ||
			!strings.Contains(string(out), run.says) {
			t.Errorf("text token column, token %d: exit %d; output:\n%s", run.token, code, out)
		}
	}
	for _, res := range []string{"", strings.Repeat("x", fence.MaxSQLResource+1)} {
		if _, err := db2.ExecContext(t.Context(), "SELECT leased_fence_check($1, 5)", res); err == nil || !strings.Contains(err.Error(), "want 1 to 255") {
			t.Errorf("leased_fence_check of a %d-byte resource: %v, want it refused", len(res), err)
		}
	}
}

// A rollback to a savepoint taken before Check undoes the raise and lets
// go of the row's lock, as PostgreSQL does for everything a
// subtransaction did: a successor is not held up, commits a higher token,
// and the first transaction, open still, is fenced again only by a new
// Check (found by an outside client; the docs say so).
func TestSQLSavepointRollbackUndoesTheCheck(t *testing.T) {
	db, f := sqlFence(t)
	ctx := t.Context()
	if err := fencedWrite(ctx, db, f, nil, "r", 3, "three"); err != nil {
		t.Fatal(err)
	}
	first, _ := beginWithPID(t, db, nil)
	if _, err := first.ExecContext(ctx, "SAVEPOINT before_check"); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(ctx, first, "r", 10); err != nil {
		t.Fatal(err)
	}
	if _, err := first.ExecContext(ctx, "ROLLBACK TO SAVEPOINT before_check"); err != nil {
		t.Fatal(err)
	}

	next, _ := beginWithPID(t, db, nil)
	var locked int
	if err := next.QueryRowContext(ctx, "SELECT 1 FROM leased_fence WHERE resource = 'r' FOR UPDATE NOWAIT").Scan(&locked); err != nil {
		t.Fatalf("the row is still locked after the rollback to the savepoint: %v", err)
	}
	if err := f.Check(ctx, next, "r", 20); err != nil {
		t.Fatal(err)
	}
	if err := next.Commit(); err != nil {
		t.Fatal(err)
	}
	if h := highest(t, db, f, "r"); h != 20 {
		t.Fatalf("Highest = %d, want 20", h)
	}
	var se *fence.StaleTokenError
	if err := f.Check(ctx, first, "r", 10); !errors.As(err, &se) || se.Highest != 20 {
		t.Fatalf("Check(10) again in the first transaction = %v, want stale with highest 20", err)
	}
}
