package api

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/leased/leased/kvlease"
)

// ErrorBody is the body of an error reply.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Holder and Token name the current holder when Code is "held".
	Holder string `json:"holder,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	// HeldBackMS, when Code is "held", says that tenure was revoked and
	// the lease stays held for about this long still (kvlease.HeldError).
	HeldBackMS int64 `json:"held_back_ms,omitempty"`
	// Revision is the tenure's current revision when Code is "conflict".
	Revision uint64 `json:"revision,omitempty"`
}

// ErrorBodyOf maps an error from kvlease (or the service's own checks) to
// its wire code and a message without Go package names. verb, the last
// token of the request's subject, distinguishes "the lease is gone" on
// renew/release/deregister (expired) from get/revoke (not_found).
func ErrorBodyOf(verb string, err error) ErrorBody {
	b := ErrorBody{Message: wireMessage(err.Error())}
	var held *kvlease.HeldError
	var stale *kvlease.StaleRevisionError
	switch {
	case errors.As(err, &held):
		// Rounded up: a hold of less than a millisecond is still a hold,
		// not a plain "held" a caller waits on an event for (none marks
		// a hold's end).
		b.Code, b.Holder, b.Token, b.HeldBackMS = CodeHeld, held.Holder, uint64(held.Token), (held.HeldBack + time.Millisecond - 1).Milliseconds()
	case errors.As(err, &stale):
		b.Code, b.Revision = CodeConflict, stale.Revision
	case errors.Is(err, kvlease.ErrHeld):
		b.Code = CodeHeld
	case errors.Is(err, ErrTooLarge), errors.Is(err, kvlease.ErrTooLarge):
		b.Code = CodeTooLarge
	case errors.Is(err, ErrLimitExceeded):
		b.Code = CodeLimitExceeded
	case errors.Is(err, ErrTooLate):
		b.Code = CodeTooLate
	case errors.Is(err, kvlease.ErrRequestMismatch):
		b.Code = CodeRequestMismatch
	case errors.Is(err, kvlease.ErrRequestUsed):
		b.Code = CodeRequestUsed
	case errors.Is(err, kvlease.ErrDurationOutOfRange):
		b.Code = CodeTTLOutOfRange
	case errors.Is(err, kvlease.ErrInvalidName), errors.Is(err, kvlease.ErrInvalidHolder), errors.Is(err, ErrInvalidRequest),
		errors.Is(err, kvlease.ErrInvalidRequestID), errors.Is(err, kvlease.ErrInvalidTenure):
		b.Code = CodeInvalidArgument
	case errors.Is(err, kvlease.ErrStaleRevision):
		b.Code = CodeConflict
	case errors.Is(err, kvlease.ErrNotHolder):
		b.Code = CodeNotHolder
	case errors.Is(err, kvlease.ErrNotFound) && (verb == "renew" || verb == "release" || verb == "deregister"):
		b.Code = CodeExpired
	case errors.Is(err, kvlease.ErrNotFound):
		b.Code = CodeNotFound
	case errors.Is(err, kvlease.ErrUnavailable):
		b.Code = CodeUnavailable
	default:
		b.Code = CodeInternal
	}
	return b
}

// goPackagePrefix matches the names of this module's Go packages that begin
// its error texts ("kvlease: ", "fence: "), at the start or after a
// wrapping ": ".
var goPackagePrefix = regexp.MustCompile(`(?m)(^|: )(?:kvlease|fence|election|workqueue|readlease|grantor|client|registry|membership): `)

// Message is err's text for people and for callers in any language: without
// the Go package names, which mean nothing outside this module. The wire's
// error messages and the CLI's are written with it.
func Message(err error) string { return wireMessage(err.Error()) }

// wireMessage also puts the lines of joined errors (errors.Join) on one
// line, as a header value must be.
func wireMessage(s string) string {
	return strings.ReplaceAll(goPackagePrefix.ReplaceAllString(s, "$1"), "\n", "; ")
}

// Err turns an error reply back into the kvlease error it stands for, so
// that Go clients test errors exactly as callers of kvlease.Store.
func (b ErrorBody) Err() error {
	var sentinel error
	switch b.Code {
	case CodeHeld:
		sentinel = &kvlease.HeldError{Name: "", Holder: b.Holder, Token: kvlease.Token(b.Token),
			HeldBack: time.Duration(b.HeldBackMS) * time.Millisecond}
	case CodeInvalidArgument:
		sentinel = ErrInvalidRequest
		switch {
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidName.Error())):
			sentinel = kvlease.ErrInvalidName
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidHolder.Error())):
			sentinel = kvlease.ErrInvalidHolder
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidRequestID.Error())):
			sentinel = kvlease.ErrInvalidRequestID
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidTenure.Error())):
			sentinel = kvlease.ErrInvalidTenure
		}
	case CodeTTLOutOfRange:
		sentinel = kvlease.ErrDurationOutOfRange
	case CodeTooLarge:
		sentinel = ErrTooLarge
	case CodeLimitExceeded:
		sentinel = ErrLimitExceeded
	case CodeTooLate:
		sentinel = ErrTooLate
	case CodeRequestMismatch:
		sentinel = kvlease.ErrRequestMismatch
	case CodeRequestUsed:
		sentinel = kvlease.ErrRequestUsed
	case CodeConflict:
		sentinel = &kvlease.StaleRevisionError{Revision: b.Revision}
	case CodeNotHolder:
		sentinel = kvlease.ErrNotHolder
	case CodeExpired, CodeNotFound:
		sentinel = kvlease.ErrNotFound
	case CodeUnavailable:
		sentinel = kvlease.ErrUnavailable
		if strings.Contains(b.Message, wireMessage(kvlease.ErrStoreFull.Error())) {
			// The code stays unavailable on the wire (clients that know
			// no other retry it as such); a Go client tests for it as a
			// Store's caller does.
			sentinel = errors.Join(kvlease.ErrStoreFull, kvlease.ErrUnavailable)
		}
	default:
		sentinel = ErrInternal
	}
	return &ServiceError{Code: b.Code, Message: b.Message, sentinel: sentinel}
}

// ServiceError is an error reply from the service.
type ServiceError struct {
	Code     string
	Message  string
	sentinel error
}

func (e *ServiceError) Error() string {
	if e.Code == CodeExpired {
		// The message says how it ended (lapsed, released or revoked):
		// "expired" in front of it read as "lapsed" to holders that had
		// been revoked.
		return "tenure ended: " + e.Message
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the kvlease sentinel the code stands for.
func (e *ServiceError) Unwrap() error { return e.sentinel }

type tooLarge struct{}

func (tooLarge) Error() string { return "grantor: too large" }

// Is makes errors.Is(ErrTooLarge, kvlease.ErrTooLarge) true.
func (tooLarge) Is(target error) bool { return target == kvlease.ErrTooLarge }

type tooLate struct{}

func (tooLate) Error() string { return "too late: the request arrived after its caller's deadline" }

// Is makes errors.Is(ErrTooLate, kvlease.ErrUnavailable) true. Its message
// is its own: wrapped, it began "grantor unavailable", which read as
// another error than too_late (found by an outside client).
func (tooLate) Is(target error) bool { return target == kvlease.ErrUnavailable }

// Sentinels for the service's own refusals (kvlease's cover the rest).
var (
	// ErrInvalidRequest: malformed JSON, unknown fields, missing values.
	ErrInvalidRequest = errors.New("grantor: invalid request")
	// ErrTooLarge: the request body or the attributes exceed the policy.
	// It is also kvlease.ErrTooLarge, which a client tests as for a Store.
	ErrTooLarge error = tooLarge{}
	// ErrLimitExceeded: the holder has as many leases as the policy allows.
	ErrLimitExceeded = errors.New("grantor: limit exceeded")
	// ErrInternal: the service failed in a way the client cannot fix.
	ErrInternal = errors.New("grantor: internal error")
	// ErrTooLate (also kvlease.ErrUnavailable): the request arrived after
	// the deadline its caller put on it ([HeaderDeadline]) and was not
	// carried out; a caller still waiting sends it again.
	ErrTooLate error = tooLate{}
)
