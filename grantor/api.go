package grantor

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/leased/leased/kvlease"
)

// Subjects of the service API.
const (
	ServiceName    = "leased"
	ServiceVersion = "0.1.0"

	SubjectGrant   = "lease.v1.grant"
	SubjectRenew   = "lease.v1.renew"
	SubjectRelease = "lease.v1.release"
	SubjectGet     = "lease.v1.get"
	SubjectList    = "lease.v1.list"
	// HeaderTimeout, on a request, tells the service how many milliseconds
	// the caller will wait for the reply; the service works no longer.
	HeaderTimeout = "Leased-Timeout-Ms"

	// SubjectEvents prefixes the subjects on which the service publishes
	// grants and ends of tenures: lease.events.v1.<lease name>.
	SubjectEvents = "lease.events.v1."

	SubjectRegister   = "svc.v1.register"
	SubjectDeregister = "svc.v1.deregister"
	SubjectDiscover   = "svc.v1.discover"

	// SubjectRevoke is outside lease.v1 so that NATS permissions can allow
	// clients "lease.v1.>" and reserve "lease.admin.>" for operators.
	SubjectRevoke = "lease.admin.v1.revoke"
)

// Error codes, sent in the Nats-Service-Error-Code header and in the body.
// They are part of the API: clients match on them.
const (
	CodeInvalidArgument = "invalid_argument" // malformed JSON, bad name or holder, unknown field
	CodeTTLOutOfRange   = "ttl_out_of_range" // duration outside the policy's bounds
	CodeTooLarge        = "too_large"        // request body or attributes over the limit
	CodeHeld            = "held"             // grant refused: someone holds the lease
	CodeNotHolder       = "not_holder"       // renew/release by someone who is not the holder
	CodeConflict        = "conflict"         // the holder's revision is stale (a lost reply?)
	CodeExpired         = "expired"          // renew/release of a lease that lapsed or was revoked
	CodeNotFound        = "not_found"        // get/revoke of a lease that is not live
	CodeLimitExceeded   = "limit_exceeded"   // too many leases for this holder
	CodeUnavailable     = "unavailable"      // the bucket could not be reached in time
	CodeInternal        = "internal"         // a bug or a corrupt record: see the server log
)

// Duration is a time.Duration that is a Go duration string ("10s",
// "1m30s") in JSON.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string like \"10s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// TTL returns d as an explicit wire duration (for the TTL fields of
// requests, where nil means "not given").
func TTL(d time.Duration) *Duration { v := Duration(d); return &v }

// GrantRequest is the body of lease.v1.grant.
type GrantRequest struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	// TTL is the duration asked for; absent: the policy's default. An
	// explicit value outside the policy's bounds, "0s" included, is
	// ttl_out_of_range.
	TTL        *Duration         `json:"ttl,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
}

// RenewRequest is the body of lease.v1.renew.
type RenewRequest struct {
	Name     string `json:"name"`
	Holder   string `json:"holder"`
	Token    uint64 `json:"token"`
	Revision uint64 `json:"revision"`
	Secret   string `json:"secret"`
	// TTL is the new duration; absent: the tenure's own. An explicit
	// value outside the policy's bounds, "0s" included, is ttl_out_of_range.
	TTL *Duration `json:"ttl,omitempty"`
}

// ReleaseRequest is the body of lease.v1.release.
type ReleaseRequest struct {
	Name     string `json:"name"`
	Holder   string `json:"holder"`
	Token    uint64 `json:"token"`
	Revision uint64 `json:"revision"`
	Secret   string `json:"secret"`
}

// GetRequest is the body of lease.v1.get.
type GetRequest struct {
	Name string `json:"name"`
}

// ListRequest is the body of lease.v1.list.
type ListRequest struct {
	Prefix string `json:"prefix,omitempty"`
}

// RevokeRequest is the body of lease.admin.v1.revoke.
type RevokeRequest struct {
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
}

// Lease is a lease record on the wire.
type Lease struct {
	Name     string `json:"name"`
	Holder   string `json:"holder"`
	Token    uint64 `json:"token"`
	Revision uint64 `json:"revision"`
	// TTL is the duration the holder asked for (D); ServerTTL what the
	// server keeps the key for, ceil(D + grantor margin).
	TTL        Duration          `json:"ttl"`
	ServerTTL  Duration          `json:"server_ttl"`
	StoredAt   time.Time         `json:"stored_at"`
	GrantedAt  time.Time         `json:"granted_at"`
	ExpiresAt  time.Time         `json:"expires_at"`
	Attributes map[string]string `json:"attributes,omitempty"`
	// Secret is set only in the reply to a grant.
	Secret string `json:"secret,omitempty"`
	// ServerTime is the grantor's wall clock when it replied.
	ServerTime time.Time `json:"server_time"`
	// Node names the grantor node that replied (its WithNodeName, `serve
	// --name`), whose clock ServerTime is; empty if it has no name.
	Node string `json:"node,omitempty"`
	// Flapping is set in list replies for a lease whose holder changed more
	// often than the grantor's flapping threshold allows.
	Flapping bool `json:"flapping,omitempty"`
}

// ListReply is the body of a lease.v1.list reply.
type ListReply struct {
	Leases []Lease `json:"leases"`
}

// ErrorBody is the body of an error reply.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Holder and Token name the current holder when Code is "held".
	Holder string `json:"holder,omitempty"`
	Token  uint64 `json:"token,omitempty"`
	// Revision is the tenure's current revision when Code is "conflict".
	Revision uint64 `json:"revision,omitempty"`
}

func toWire(r kvlease.Record, now time.Time) Lease {
	l := LeaseOf(r)
	l.ServerTime = now
	return l
}

// LeaseOf is a lease record in its wire form (without the server's time).
func LeaseOf(r kvlease.Record) Lease {
	return Lease{
		Name: r.Name, Holder: r.Holder, Token: uint64(r.Token), Revision: r.Revision,
		TTL: Duration(r.Duration), ServerTTL: Duration(r.TTL),
		StoredAt: r.StoredAt, GrantedAt: r.GrantedAt, ExpiresAt: r.ExpiresAt(),
		Attributes: r.Attributes, Secret: r.Secret,
	}
}

func fromWire(l Lease) kvlease.Record {
	return kvlease.Record{
		Name: l.Name, Holder: l.Holder, Token: kvlease.Token(l.Token), Revision: l.Revision,
		Duration: time.Duration(l.TTL), TTL: time.Duration(l.ServerTTL),
		StoredAt: l.StoredAt, GrantedAt: l.GrantedAt, Attributes: l.Attributes, Secret: l.Secret,
	}
}

// errorBody maps an error from kvlease (or the service's own checks) to its
// wire code. verb distinguishes "the lease is gone" on renew/release
// (expired) from get/revoke (not_found).
func errorBody(verb string, err error) ErrorBody {
	b := ErrorBody{Message: wireMessage(err.Error())}
	var held *kvlease.HeldError
	var stale *kvlease.StaleRevisionError
	switch {
	case errors.As(err, &held):
		b.Code, b.Holder, b.Token = CodeHeld, held.Holder, uint64(held.Token)
	case errors.As(err, &stale):
		b.Code, b.Revision = CodeConflict, stale.Revision
	case errors.Is(err, kvlease.ErrHeld):
		b.Code = CodeHeld
	case errors.Is(err, ErrTooLarge):
		b.Code = CodeTooLarge
	case errors.Is(err, ErrLimitExceeded):
		b.Code = CodeLimitExceeded
	case errors.Is(err, kvlease.ErrDurationOutOfRange):
		b.Code = CodeTTLOutOfRange
	case errors.Is(err, kvlease.ErrInvalidName), errors.Is(err, kvlease.ErrInvalidHolder), errors.Is(err, ErrInvalidRequest):
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

// goPackagePrefix matches the Go package names that begin our error texts
// ("kvlease: ", "grantor: "), at the start or after a wrapping ": ".
var goPackagePrefix = regexp.MustCompile(`(^|: )(?:kvlease|grantor|membership): `)

// wireMessage is an error text for callers in any language: without the Go
// package names, which mean nothing outside this module.
func wireMessage(s string) string { return goPackagePrefix.ReplaceAllString(s, "$1") }

// Err turns an error reply back into the kvlease error it stands for, so
// that callers of [Client] test errors exactly as callers of kvlease.Store.
func (b ErrorBody) Err() error {
	var sentinel error
	switch b.Code {
	case CodeHeld:
		sentinel = &kvlease.HeldError{Name: "", Holder: b.Holder, Token: kvlease.Token(b.Token)}
	case CodeInvalidArgument:
		sentinel = ErrInvalidRequest
		switch {
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidName.Error())):
			sentinel = kvlease.ErrInvalidName
		case strings.Contains(b.Message, wireMessage(kvlease.ErrInvalidHolder.Error())):
			sentinel = kvlease.ErrInvalidHolder
		}
	case CodeTTLOutOfRange:
		sentinel = kvlease.ErrDurationOutOfRange
	case CodeTooLarge:
		sentinel = ErrTooLarge
	case CodeLimitExceeded:
		sentinel = ErrLimitExceeded
	case CodeConflict:
		sentinel = &kvlease.StaleRevisionError{Revision: b.Revision}
	case CodeNotHolder:
		sentinel = kvlease.ErrNotHolder
	case CodeExpired, CodeNotFound:
		sentinel = kvlease.ErrNotFound
	case CodeUnavailable:
		sentinel = kvlease.ErrUnavailable
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

func (e *ServiceError) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the kvlease sentinel the code stands for.
func (e *ServiceError) Unwrap() error { return e.sentinel }

// Sentinels for the service's own refusals (kvlease's cover the rest).
var (
	// ErrInvalidRequest: malformed JSON, unknown fields, missing values.
	ErrInvalidRequest = errors.New("grantor: invalid request")
	// ErrTooLarge: the request body or the attributes exceed the policy.
	ErrTooLarge = errors.New("grantor: too large")
	// ErrLimitExceeded: the holder has as many leases as the policy allows.
	ErrLimitExceeded = errors.New("grantor: limit exceeded")
	// ErrInternal: the service failed in a way the client cannot fix.
	ErrInternal = errors.New("grantor: internal error")
)
