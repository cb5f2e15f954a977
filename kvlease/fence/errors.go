package fence

import (
	"errors"
	"fmt"

	"github.com/leased/leased/kvlease"
)

// ErrStaleToken: a fence refused a token lower than one it has accepted
// (see [StaleTokenError]). It lives here, not in kvlease, because only a
// resource refuses tokens: the lease core never returns it.
var ErrStaleToken = errors.New("fence: stale fencing token")

// StaleTokenError is returned by a fence that has already accepted a higher
// token for the resource.
type StaleTokenError struct {
	Resource string
	Token    kvlease.Token
	Highest  kvlease.Token
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: %d already accepted", e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }

// ErrInvalidToken: a fence was given a token no tenure has: 0 (never a
// KV revision), or one above the largest bigint. Nothing was sent.
var ErrInvalidToken = errors.New("fence: invalid fencing token")

// ErrInvalidResource: [SQL.Check] was given a resource name its table
// cannot hold: empty, longer than [MaxSQLResource] bytes, not UTF-8, or
// holding a NUL byte. Nothing was sent.
var ErrInvalidResource = errors.New("fence: invalid resource name")

// ErrDatabase: the database failed a fence statement (connection lost,
// server error, aborted transaction, cancelled context). The error is a
// [*DatabaseError], which keeps the driver's error reachable with
// [errors.As]. Roll the transaction back.
var ErrDatabase = errors.New("fence: database error")

// ErrSerialization: the database aborted the transaction to keep it
// serializable (SQLSTATE 40001, serialization_failure) or to break a
// deadlock (40P01, deadlock_detected). Roll back and retry the whole
// transaction, with the same token. It comes with [ErrDatabase].
var ErrSerialization = errors.New("fence: serialization failure: retry the transaction")

// DatabaseError is a fence statement's failure at the database.
type DatabaseError struct {
	Op       string // what the fence was doing: "check", "read", "create table"
	Resource string // the resource checked, if any
	SQLState string // the SQLSTATE code, if the driver reports one ("40001"), else ""
	Err      error  // the driver's (or database/sql's, or the context's) error
}

func (e *DatabaseError) Error() string {
	s := "fence: " + e.Op
	if e.Resource != "" {
		s += fmt.Sprintf(" %q", e.Resource)
	}
	if e.SQLState != "" {
		s += " (SQLSTATE " + e.SQLState + ")"
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the driver's error.
func (e *DatabaseError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrDatabase) true, and errors.Is(err,
// ErrSerialization) for a serialization failure or a deadlock.
func (e *DatabaseError) Is(target error) bool {
	return target == ErrDatabase || (target == ErrSerialization && retryableState(e.SQLState))
}
