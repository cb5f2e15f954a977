package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/telemetry"
)

// DefaultSQLTable is the usual name of an [SQL] fence's table.
const DefaultSQLTable = "leased_fence"

// MaxSQLResource is the longest resource name, in bytes, an [SQL] fence
// takes.
const MaxSQLResource = 255

// SQL is a fence inside a PostgreSQL database, the resource users' data
// lives in: a table (resource text PRIMARY KEY, token bigint) holding each
// resource's highest accepted token, raised by [SQL.Check] inside the
// caller's own transaction, so that the token check and the guarded write
// commit or fail together.
//
// It uses [database/sql] only, with PostgreSQL's dialect (INSERT … ON
// CONFLICT, $n parameters): bring a driver, such as
// github.com/jackc/pgx/v5/stdlib. It is safe for concurrent use.
type SQL struct {
	// Metrics, if set, counts rejections ([telemetry.MetricFenceRejections]).
	Metrics *telemetry.Metrics

	table, quoted    string
	create, up, read string
	rejected         atomic.Int64
}

// A plain, unquoted PostgreSQL identifier (at most 63 bytes: NAMEDATALEN-1),
// optionally schema-qualified.
var sqlIdent = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// NewSQL returns a fence on table ([DefaultSQLTable] unless you need
// another), a plain identifier (letters, digits and underscores, not
// starting with a digit, optionally "schema.table"). It names the table
// PostgreSQL would take it for unquoted (folded to lower case), but is
// quoted in statements, so that a reserved word ("user", "order") works
// too. Create the table with [SQL.CreateTable] or with the statement
// docs/fencing.md shows.
//
// Errors: [kvlease.ErrInvalidOption] for any other name.
func NewSQL(table string) (*SQL, error) {
	if !sqlIdent.MatchString(table) {
		return nil, fmt.Errorf("%w: fence table %q: want a plain identifier (letters, digits, _), optionally schema-qualified",
			kvlease.ErrInvalidOption, table)
	}
	// Quoted, a reserved word is a name; folded first, the name is the
	// one an unquoted identifier means (NewSQL("user") took every
	// statement for a syntax error; found by an outside client).
	parts := strings.Split(strings.ToLower(table), ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	q := strings.Join(parts, ".")
	return &SQL{
		table:  table,
		quoted: q,
		create: "CREATE TABLE IF NOT EXISTS " + q + " (resource text PRIMARY KEY, token bigint NOT NULL CHECK (token > 0))",
		// The seed's "raise the token": no row returned means a higher
		// token is already there. ON CONFLICT DO UPDATE locks the
		// conflicting row even when its WHERE is false.
		up: "INSERT INTO " + q + " AS cur (resource, token) VALUES ($1, $2) " +
			"ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE cur.token <= EXCLUDED.token " +
			"RETURNING cur.token",
		read: "SELECT token FROM " + q + " WHERE resource = $1",
	}, nil
}

// Table returns the fence's table name.
func (f *SQL) Table() string { return f.table }

// CreateTable creates the fence's table if it does not exist:
//
//	CREATE TABLE IF NOT EXISTS leased_fence (
//	  resource text PRIMARY KEY,
//	  token bigint NOT NULL CHECK (token > 0))
//
// and checks that the table it finds has that shape: a token column of
// another type compares tokens as that type does ("10" <= "9" as text).
// It refuses an UNLOGGED or TEMPORARY table too: a crash of the server
// empties an unlogged table, and a missing row accepts any token.
// A table that exists is only checked, so a role that may not create
// tables in its schema (on PostgreSQL 15 and later, any role but the
// database's owner in a new database's public schema) can call it on a
// table its migrations made.
//
// Errors: [ErrDatabase]; [kvlease.ErrInvalidOption] for a table of
// another shape, or not permanent.
func (f *SQL) CreateTable(ctx context.Context, db *sql.DB) error {
	// Looked up first: CREATE TABLE IF NOT EXISTS checks the schema's
	// CREATE privilege before it looks for the table, and refused an
	// application role the table its migrations had made ("permission
	// denied for schema public", 42501; found in review).
	var exists bool
	if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", f.quoted).Scan(&exists); err != nil {
		return dbError("look up the table", "", err)
	}
	if !exists {
		_, err := db.ExecContext(ctx, f.create)
		if s := sqlState(err); s == "23505" || s == "42P07" || s == "42710" {
			// Two first calls raced in the catalog (unique_violation on
			// pg_type, duplicate_table, or duplicate_object: the table's
			// row type, made by the other, committed after this one
			// looked for the table): the table exists now.
			_, err = db.ExecContext(ctx, f.create)
		}
		if err != nil {
			return dbError("create table", "", err)
		}
	}
	var resource, token string
	var keyed, permanent bool
	if err := db.QueryRowContext(ctx, shapeQuery, f.quoted).Scan(&resource, &token, &keyed, &permanent); err != nil {
		return dbError("read the table's columns", "", err)
	}
	if resource != "text" || token != "bigint" || !keyed {
		// Found by an outside client: the documented setup skipped a
		// table with a text token column, and took 9 after 10.
		return fmt.Errorf("%w: fence table %s exists with resource %q and token %q (primary key on resource: %v); "+
			"want resource text PRIMARY KEY, token bigint", kvlease.ErrInvalidOption, f.table, resource, token, keyed)
	}
	if !permanent {
		// An UNLOGGED table is emptied by a crash of the server, and a
		// missing row accepts any token: after a restart a stale holder's
		// write was accepted (found by an outside client). A TEMPORARY
		// one is one session's own.
		return fmt.Errorf("%w: fence table %s is UNLOGGED or TEMPORARY: a crash empties an unlogged table, "+
			"and a missing row accepts any token; want a permanent, logged table", kvlease.ErrInvalidOption, f.table)
	}
	return nil
}

// shapeQuery reads the types of a table's resource and token columns,
// whether resource alone is its primary key, and whether the table is
// permanent (neither UNLOGGED nor TEMPORARY).
const shapeQuery = `SELECT
  coalesce((SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
            WHERE a.attrelid = c.oid AND a.attname = 'resource' AND NOT a.attisdropped), ''),
  coalesce((SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a
            WHERE a.attrelid = c.oid AND a.attname = 'token' AND NOT a.attisdropped), ''),
  EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
          WHERE i.indrelid = c.oid AND i.indisprimary AND i.indnatts = 1 AND a.attname = 'resource'),
  (SELECT r.relpersistence = 'p' FROM pg_class r WHERE r.oid = c.oid)
FROM (SELECT $1::regclass::oid AS oid) c`

// Check raises resource's token to token inside tx, or refuses token if a
// higher one is there. Call it in the transaction that makes the guarded
// write, before that write, and commit only if it returns nil:
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	if err := f.Check(ctx, tx, "account-42", lease.Token()); err != nil {
//		return err // *fence.StaleTokenError: a newer holder has written
//	}
//	_, err = tx.ExecContext(ctx, "UPDATE account SET balance = $1 WHERE id = 42", balance)
//	…
//	return tx.Commit()
//
// It runs one statement (and a read when it refuses):
//
//	INSERT INTO leased_fence AS cur (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token
//	 WHERE cur.token <= EXCLUDED.token
//	RETURNING cur.token
//	-- no row: the token is stale
//
// Equal tokens are accepted: one tenure may write many times.
//
// # Why it is correct
//
// The statement takes the resource row's lock, and keeps it until tx
// commits or rolls back (it takes it even when it refuses). Fenced
// transactions on one resource are therefore serialized from their Check
// on: the guarded write that follows in tx and the raised token commit
// together, or neither does. A transaction that rolls back raises
// nothing, and no lower token can commit after a higher one did. A
// rollback to a savepoint taken before Check (an ORM's nested
// transaction) is a rollback too: it undoes the raise and lets go of the
// lock, so a higher token can commit meanwhile; Check again before any
// guarded write that follows it.
//
// Under READ COMMITTED (PostgreSQL's default), a Check that finds the row
// locked waits for the holder's commit or rollback, then evaluates its
// WHERE against the row as committed, so it sees the newer token. Under
// REPEATABLE READ or SERIALIZABLE, a Check whose snapshot predates the
// committed row fails with a serialization failure instead: the error
// matches [ErrSerialization], and the whole transaction must be rolled
// back and retried (tx.Commit can fail the same way: test it with
// [Retryable]). Either way Check never accepts a token lower than one
// committed before it.
//
// The lock has a cost: a holder that pauses while its transaction is open
// (after Check, before commit) holds up its successor's Check for as long.
// Its late commit is still safe: it is ordered before the successor's
// write, which then supersedes it. Bound the wait with PostgreSQL's
// idle_in_transaction_session_timeout (for the holders' sessions: a
// paused holder's session is ended and its commit fails) or lock_timeout
// (the waiting Check fails with a [*DatabaseError], SQLSTATE 55P03, which
// [Retryable] does not count: roll back, and check again later).
//
// # Errors
//
// [ErrInvalidToken] (0, or above the largest bigint) and
// [ErrInvalidResource] (see [MaxSQLResource]), with nothing sent;
// [sql.ErrTxDone] (tx is nil, committed or rolled back); [*StaleTokenError]
// (counted in [SQL.Rejected]; roll back, and stop acting as the holder: a
// refusal also aborts tx, so that its later statements fail and its
// Commit rolls back, should a caller go on);
// [*DatabaseError], matching [ErrDatabase], and [ErrSerialization] when
// retrying the transaction may succeed. After any error, roll tx back:
// Check has raised nothing that will commit.
func (f *SQL) Check(ctx context.Context, tx *sql.Tx, resource string, token kvlease.Token) error {
	if err := checkToken(token); err != nil {
		return err
	}
	if err := validSQLResource(resource); err != nil {
		return err
	}
	if tx == nil {
		return fmt.Errorf("fence: check %q: nil transaction: %w", resource, sql.ErrTxDone)
	}
	var raised int64
	err := tx.QueryRowContext(ctx, f.up, resource, int64(token)).Scan(&raised)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return dbError("check", resource, err)
	}
	// Refused. The row is locked by this transaction, so this read sees
	// the token that refused it.
	var highest int64
	if err := tx.QueryRowContext(ctx, f.read, resource).Scan(&highest); err != nil {
		return dbError("read", resource, err)
	}
	f.rejected.Add(1)
	f.Metrics.StaleTokenRejected(ctx, resource)
	// Fail closed: a caller that went on in spite of the refusal (an
	// error dropped) committed its stale write, where the plain-SQL
	// function of docs/fencing.md raises an exception (found by an outside
	// client). Aborted, the transaction refuses every later statement,
	// and its COMMIT rolls back. This statement's own error is that abort.
	// Sent past ctx: database/sql sends nothing on a ctx that has ended,
	// and a Check whose own ctx ended as it refused left the transaction
	// open to a stale write that committed (found in review). Bounded,
	// for a database that stopped answering: a statement cut off by its
	// ctx loses its connection, and the transaction with it.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	_, _ = tx.ExecContext(actx, abortStale)
	return &StaleTokenError{Resource: resource, Token: token, Highest: kvlease.Token(highest)}
}

// abortTimeout bounds the statement that aborts a refused transaction.
const abortTimeout = 5 * time.Second

// abortStale aborts the transaction it runs in, SQLSTATE P0001.
const abortStale = `DO $$BEGIN RAISE EXCEPTION 'leased fence: stale token refused; this transaction is aborted'; END$$`

// RowQuerier is what [SQL.Highest] reads through: a [*sql.DB], [*sql.Tx]
// or [*sql.Conn].
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

var (
	_ RowQuerier = (*sql.DB)(nil)
	_ RowQuerier = (*sql.Tx)(nil)
	_ RowQuerier = (*sql.Conn)(nil)
)

// Highest returns the highest token accepted for resource (0 if none).
// Read through a transaction it is that transaction's view; through a
// [*sql.DB], what is committed.
//
// Errors: [ErrInvalidResource]; [sql.ErrTxDone]; [ErrDatabase].
func (f *SQL) Highest(ctx context.Context, q RowQuerier, resource string) (kvlease.Token, error) {
	if err := validSQLResource(resource); err != nil {
		return 0, err
	}
	var highest int64
	switch err := q.QueryRowContext(ctx, f.read, resource).Scan(&highest); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, dbError("read", resource, err)
	}
	return kvlease.Token(highest), nil
}

// Rejected counts refused tokens.
func (f *SQL) Rejected() int64 { return f.rejected.Load() }

// Retryable reports whether err is a serialization failure or a deadlock
// (SQLSTATE 40001 or 40P01), from [SQL.Check] or from any statement or
// commit of the transaction: roll back and run the transaction again.
// It finds the SQLSTATE through any driver error with a SQLState() string
// method (pgx's *pgconn.PgError has one).
func Retryable(err error) bool {
	return errors.Is(err, ErrSerialization) || retryableState(sqlState(err))
}

func retryableState(s string) bool { return s == "40001" || s == "40P01" }

// sqlState returns the SQLSTATE of a driver error, or "".
func sqlState(err error) string {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		return st.SQLState()
	}
	return ""
}

// dbError wraps a failed statement's error: sql.ErrTxDone (the caller's
// transaction is over) as it is, anything else as a *DatabaseError.
func dbError(op, resource string, err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("fence: %s %q: %w", op, resource, err)
	}
	return &DatabaseError{Op: op, Resource: resource, SQLState: sqlState(err), Err: err}
}

// validSQLResource checks that the text column can hold resource.
func validSQLResource(resource string) error {
	switch {
	case resource == "":
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	case len(resource) > MaxSQLResource:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidResource, len(resource), MaxSQLResource)
	case !utf8.ValidString(resource):
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidResource, resource)
	case strings.IndexByte(resource, 0) >= 0:
		return fmt.Errorf("%w: %q holds a NUL byte", ErrInvalidResource, resource)
	}
	return nil
}
