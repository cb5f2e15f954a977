package kvlease

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Sentinel errors. Every error this package makes wraps one of these, so
// callers test with [errors.Is] and never need to import NATS error values:
// [Open], the [Store]'s methods, [Watcher.Err] and the validation functions
// return nothing else (a context that ends mid-call comes back as
// [ErrUnavailable] wrapping the context's error, so both match). Two kinds
// of error pass through as they came:
//
//   - What a [Grantor] returns, from [Acquire], [Lease.Renew],
//     [Lease.Release] and as a keeper's loss reason. The Store's wrap these
//     sentinels, and [github.com/leased/leased/grantor/client] maps the
//     service's error codes onto them, but the service also refuses with
//     codes of its own (too large, limit exceeded, …: see
//     [github.com/leased/leased/grantor/api]), and another Grantor may
//     return anything.
//   - The cause of the context given to [Keep], from [Keeper.Err] and
//     context.Cause of [Keeper.Context] once that context has ended.
var (
	// ErrInvalidName: the lease name breaks NATS key rules or is too long.
	ErrInvalidName = errors.New("kvlease: invalid lease name")
	// ErrInvalidHolder: the holder identity is empty, too long or not printable.
	ErrInvalidHolder = errors.New("kvlease: invalid holder")
	// ErrDurationOutOfRange: the requested duration is outside the policy's bounds.
	ErrDurationOutOfRange = errors.New("kvlease: duration out of range")
	// ErrInvalidTiming: margins, clock-rate bound or renew interval leave no
	// room to renew.
	ErrInvalidTiming = errors.New("kvlease: invalid timing")
	// ErrInvalidOption: an option was given a value it cannot take.
	ErrInvalidOption = errors.New("kvlease: invalid option")
	// ErrInvalidTenure: a renewal or release named token or revision 0
	// (or left them out): no tenure has them.
	ErrInvalidTenure = errors.New("kvlease: invalid token or revision")
	// ErrInvalidRequestID: a grant's request ID or secret is malformed
	// (see [ValidateRequestID], [ValidateSecret]), or a request ID came
	// without the secret that proves a retry is its caller's.
	ErrInvalidRequestID = errors.New("kvlease: invalid request id or secret")
	// ErrRequestMismatch: a grant retried with the request ID and secret of
	// an earlier grant asked for something else (another holder, duration
	// or attributes). Nothing was written; a new request needs a new ID.
	ErrRequestMismatch = errors.New("kvlease: request id reused for a different grant")
	// ErrRequestUsed: the grant with this request ID and secret already
	// made a tenure, and that tenure has ended (released, revoked or
	// lapsed). Nothing was written: a request that arrives late, after its
	// caller moved on, must not take the lease again. A caller that still
	// wants the lease asks anew, with a new request ID.
	ErrRequestUsed = errors.New("kvlease: request id already granted a tenure that has ended")
	// ErrHeld: the lease is held by someone (see [HeldError]).
	ErrHeld = errors.New("kvlease: lease is held")
	// ErrNotHolder: a renewal or release came from someone who is not the
	// current holder, or named a revision that is no longer current.
	ErrNotHolder = errors.New("kvlease: not the holder")
	// ErrStaleRevision (always with ErrNotHolder): the tenure is still the
	// caller's, but the revision given is not current (see
	// [StaleRevisionError]). Usually an earlier renewal succeeded and its
	// reply was lost: a Lease that sent such a renewal recovers by renewing
	// the current revision; otherwise it is a loss, which the keeper counts
	// as spurious.
	ErrStaleRevision = errors.New("kvlease: stale revision")
	// ErrNotFound: no live lease has that name (never granted, released,
	// revoked or lapsed).
	ErrNotFound = errors.New("kvlease: lease not found")
	// ErrExpired: the holder-side deadline has passed (see [LeaseExpiredError]).
	ErrExpired = errors.New("kvlease: lease expired")
	// ErrUnavailable: the grantor (NATS server) could not be reached or did
	// not answer in time. The operation may or may not have taken effect.
	ErrUnavailable = errors.New("kvlease: grantor unavailable")
	// ErrStoreFull (always with ErrUnavailable): JetStream refused the
	// write for its storage limit (the server's max_file_store, or its
	// share of the disk; the account's): on one server it stores no new
	// message, renewals and releases included, until room is made or the
	// limit raised; in a cluster the stream's leader refused it for its
	// own server's limit and stepped down, and the next leader may take
	// the write. A keeper tries again while its lease lasts.
	ErrStoreFull = errors.New("kvlease: the NATS server's storage is full")
	// ErrNotSent (always with ErrUnavailable): the request was not sent
	// (no connection; a grant the client could not give a deadline yet), so
	// it took no effect and never will: a [Grantor] returns it so that
	// [Acquire] does not wait out an attempt that never went.
	ErrNotSent = errors.New("kvlease: request not sent")
	// ErrConnClosed (always with ErrUnavailable, and with ErrNotSent
	// unless the connection closed while the request was out): the NATS
	// connection was closed by its owner and never comes back, so
	// [Acquire] and [RetryUnavailable] stop at it instead of retrying
	// until their context ends ([NotConnected]).
	ErrConnClosed = errors.New("kvlease: NATS connection closed")
	// ErrBucket: the lease bucket (or a fence's or work queue's) is
	// missing or misconfigured.
	ErrBucket = errors.New("kvlease: bucket unusable")
	// ErrPermission: the NATS server's permissions refused a publish this
	// call needs (the error names its subject, and matches
	// nats.ErrPermissionViolation too). Waiting does not change that: it
	// is returned at once, never retried as [ErrUnavailable].
	ErrPermission = errors.New("kvlease: permission denied by the NATS server")
	// ErrBucketReplaced (always with ErrBucket): the bucket was deleted
	// and made anew under a watch (a NATS server restarted on an empty
	// store, a bucket recreated), so its revisions, the fencing tokens,
	// started again (docs/safety.md). A watch ends with it; a grantor
	// stops on it, to be restarted on the new bucket knowingly.
	ErrBucketReplaced = fmt.Errorf("%w: it was deleted and made anew: its revisions, the fencing tokens, started again", ErrBucket)
	// ErrClockRate (always with ErrExpired): the measured rate error between
	// the holder's and the grantor's clocks exceeds the lease's bound ρ, so
	// the holder's deadline can no longer be trusted.
	ErrClockRate = errors.New("kvlease: clock rate error exceeds the lease's bound")
	// ErrTooLarge: the lease's record (its attributes, mostly), or a
	// record written beside it (a fence's, a work queue's result), would
	// not fit in one NATS message (the server's max_payload). Nothing was
	// sent.
	ErrTooLarge = errors.New("kvlease: record too large for one NATS message")
	// ErrClosed: the keeper was closed or orphaned by its owner.
	ErrClosed = errors.New("kvlease: closed")
)

// HeldError reports who holds a lease that could not be granted.
type HeldError struct {
	Name   string
	Holder string
	Token  Token
	// HeldBack, if not zero, says the tenure of Holder and Token was
	// revoked and the lease stays held until that holder's deadline has
	// passed (see [Store.Revoke]): about HeldBack from when the grant was
	// refused. Try again then.
	HeldBack time.Duration
}

func (e *HeldError) Error() string {
	if e.HeldBack > 0 {
		return fmt.Sprintf("kvlease: lease %q %s", e.Name, e.revoked())
	}
	return fmt.Sprintf("kvlease: lease %q is held by %q (token %d)", e.Name, e.Holder, e.Token)
}

// revoked says, of a HeldError with a HeldBack, whose tenure was revoked
// and how long the lease stays held.
func (e *HeldError) revoked() string {
	left := e.HeldBack.Round(100 * time.Millisecond)
	if left >= 10*time.Second {
		left = left.Round(time.Second)
	}
	return fmt.Sprintf("was revoked from %q (token %d) and stays held until that holder's deadline has passed, in about %v",
		e.Holder, e.Token, max(left, 100*time.Millisecond))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// StaleRevisionError is [ErrStaleRevision] (and [ErrNotHolder]) with the
// revision the tenure is at now.
type StaleRevisionError struct {
	Name     string
	Revision uint64 // the tenure's current revision
}

func (e *StaleRevisionError) Error() string {
	return fmt.Sprintf("kvlease: not the holder: stale revision: %q is at revision %d", e.Name, e.Revision)
}

// Is makes errors.Is(err, ErrStaleRevision) and errors.Is(err, ErrNotHolder)
// true.
func (e *StaleRevisionError) Is(target error) bool {
	return target == ErrStaleRevision || target == ErrNotHolder
}

// LeaseExpiredError is returned by [Lease.Check] when the holder may no
// longer act: the remaining time before its deadline is less than needed.
type LeaseExpiredError struct {
	Name  string
	Token Token
	// Remaining is the time left before the holder's deadline when checked;
	// zero or negative once the deadline has passed.
	Remaining time.Duration
	// Need is the time the caller asked to have left (0 for a plain Check).
	Need time.Duration
	// Margin is the holder margin already subtracted from the deadline.
	Margin time.Duration
	// Released is true if the holder released the lease.
	Released bool
	// Refused is the grantor's refusal of a renewal (an [ErrNotHolder] or
	// [ErrNotFound] error, say) that ended the lease before its deadline;
	// nil otherwise. errors.Is sees through to it.
	Refused error
	// Unanswered counts the renewals that went unanswered since the last
	// confirmed one (or the grant), and LastFailure is the last one's
	// error (an [ErrUnavailable]): why a lease ran out while its holder
	// kept renewing. errors.Is does not see through to LastFailure: the
	// lease is lost, not the grantor unavailable.
	Unanswered  int
	LastFailure error
}

func (e *LeaseExpiredError) Error() string {
	if e.Released {
		return fmt.Sprintf("kvlease: lease %q (token %d) was released", e.Name, e.Token)
	}
	if e.Refused != nil {
		return fmt.Sprintf("kvlease: lease %q (token %d) is lost: its renewal was refused: %v", e.Name, e.Token, e.Refused)
	}
	if e.Remaining <= 0 {
		msg := fmt.Sprintf("kvlease: lease %q (token %d) expired %v ago (holder margin %v)",
			e.Name, e.Token, -e.Remaining, e.Margin)
		if e.Unanswered > 0 {
			msg += fmt.Sprintf(": %d renewal(s) unanswered since the last confirmed one, the last: %v", e.Unanswered, e.LastFailure)
		}
		return msg
	}
	return fmt.Sprintf("kvlease: lease %q (token %d) has %v left, %v needed (holder margin %v)",
		e.Name, e.Token, e.Remaining, e.Need, e.Margin)
}

// Is makes errors.Is(err, ErrExpired) true.
func (e *LeaseExpiredError) Is(target error) bool { return target == ErrExpired }

// Unwrap returns the refusal that ended the lease, if any.
func (e *LeaseExpiredError) Unwrap() error { return e.Refused }

// StaleReadError is [ErrUnavailable]: a read showed a lease at a revision
// (or a tenure) older than one the store has already issued or been shown
// for it, and kept doing so when read again. Revisions of a lease only
// grow, so the answer came from a node that is behind, such as a stream
// leader that was paused past an election and has just resumed. It is
// never evidence that the caller is not the holder: ask again.
type StaleReadError struct {
	Name  string
	Seen  uint64 // the revision the read showed
	Floor uint64 // the revision already issued or shown, which it is below
}

func (e *StaleReadError) Error() string {
	if e.Seen == e.Floor {
		return fmt.Sprintf("kvlease: grantor unavailable: the bucket refused revision %d of %q, which a read shows current: one answer came from a node that is behind",
			e.Seen, e.Name)
	}
	// Not Seen: a caller that has not proved the tenure is its own (the
	// secret is checked on the current record, which this read is not)
	// learns no revision from a renewal or release.
	return fmt.Sprintf("kvlease: grantor unavailable: a read of %q shows it at a revision behind %d, issued or named by the request "+
		"(a stream leader that lost its leadership answers from the past; or the revision given was never issued)",
		e.Name, e.Floor)
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *StaleReadError) Is(target error) bool { return target == ErrUnavailable }

// JetStreamError translates err, which a JetStream call made for op
// returned, into this package's sentinels, as the store does with its own
// calls: [ErrUnavailable] when the call may or may not have taken effect
// (no answer, a cluster without quorum, a cancelled context), [ErrBucket]
// when the server refused it. It is for packages built on kvlease that
// keep state of their own in JetStream (fences, the work queue), so that
// their callers test one set of errors. A failed compare-and-set is a
// refusal here: test for it (jetstream.ErrKeyExists,
// jetstream.ErrKeyRevisionMismatch) before translating.
func JetStreamError(op string, err error) error {
	if err := translate(op, err); !errors.Is(err, errMismatch) {
		return err
	}
	return fmt.Errorf("%w: %s refused: %w", ErrBucket, op, err)
}

// NotConnected is the error of op, which cannot be sent because nc is not
// connected: [ErrUnavailable] and [ErrNotSent] (nothing is buffered for a
// reconnect, which may come after a holder's deadline), and
// [ErrConnClosed] for a connection its owner closed (found by an outside
// client: an Acquire on a closed connection with context.Background()
// never returned).
func NotConnected(nc *nats.Conn, op string) error {
	if nc.IsClosed() {
		return fmt.Errorf("%w: %w: %w: %s", ErrUnavailable, ErrNotSent, ErrConnClosed, op)
	}
	return fmt.Errorf("%w: %w: %s: not connected to NATS (%v)", ErrUnavailable, ErrNotSent, op, nc.Status())
}
