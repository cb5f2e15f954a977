package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/redact"
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
	// HeaderDeadline, on a request, is the caller's deadline as the
	// grantor's wall clock reads it (Unix milliseconds; the caller
	// estimates the grantor's clock from the server_time of replies). A
	// request that arrives after it (it waited in a paused node, or on a
	// link that was cut) is answered too_late (an ErrUnavailable to Go
	// clients: a retry is a new request) and carried out not at all: its
	// caller has given up, and a grant made for it would keep the lease
	// taken by nobody.
	HeaderDeadline = "Leased-Deadline-Unix-Ms"
	// DeadlineSlack is how long after its HeaderDeadline a request other
	// than a renewal is still carried out: for the differences between the
	// clocks of grantor nodes, which a caller's estimate of one of them does
	// not cover. A renewal gets none: carried out after its holder's
	// deadline, it would extend a lease the holder has given up.
	DeadlineSlack = 250 * time.Millisecond
	// HeaderServerTime and HeaderNode, on every reply (errors included),
	// are the replying grantor node's wall clock (RFC 3339, nanoseconds)
	// and name: a client measures the grantor's clock offset from any
	// reply, so that its next request can carry a deadline.
	HeaderServerTime = "Leased-Server-Time"
	HeaderNode       = "Leased-Node"

	// ReservedPrefix begins the names of the leases the grantor keeps for
	// itself in its bucket; ObserverLease is the one whose holder observes
	// the bucket for the cluster (package grantor).
	ReservedPrefix = kvlease.ReservedPrefix
	ObserverLease  = ReservedPrefix + "observer"

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

// Headers of an error reply, as NATS micro services send them (the values
// of micro.ErrorCodeHeader and micro.ErrorHeader, spelt out so that clients
// need not link micro).
const (
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
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
	CodeRequestMismatch = "request_mismatch" // a retried grant's request_id asked for something else
	CodeRequestUsed     = "request_used"     // a retried grant's tenure has ended: ask with a new request_id
	CodeTooLate         = "too_late"         // arrived after the caller's deadline (Leased-Deadline-Unix-Ms); not carried out
	CodeUnavailable     = "unavailable"      // the bucket could not be reached in time
	CodeInternal        = "internal"         // a bug or a corrupt record: see the server log
)

// Duration is a time.Duration that is a Go duration string ("10s",
// "1m30s") in JSON.
type Duration time.Duration

// MarshalJSON writes d as a duration string. A duration string has
// nothing JSON escapes (digits, '.', '-', letters and 'µ'), so it is quoted
// as it is: json.Marshal of the string cost a quarter of a grantor's reply
// encoding.
func (d Duration) MarshalJSON() ([]byte, error) { return d.appendJSON(make([]byte, 0, 16)), nil }

func (d Duration) appendJSON(b []byte) []byte {
	b = append(b, '"')
	b = append(b, time.Duration(d).String()...)
	return append(b, '"')
}

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
	// RequestID makes the grant safe to send again when its reply is lost:
	// a retry with the same RequestID and Secret is answered with the
	// tenure the first attempt made ("recovered": true), not "held".
	// Optional; it needs Secret (see kvlease.GrantRequest.RequestID).
	RequestID string `json:"request_id,omitempty"`
	// Secret, if set, is the caller's own tenure secret (16–256 bytes of
	// visible ASCII), which renewals and releases must then present; left
	// out, the service makes a random one and returns it.
	Secret string `json:"secret,omitempty"`
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

// Format prints req as fmt would, but with its secret redacted, as
// [kvlease.GrantRequest.Format] does: a service or client that logs the
// requests it handles gave the holder's proof of ownership away. So do
// the other wire types that carry a secret (found by a review).
func (req GrantRequest) Format(f fmt.State, verb rune) {
	type plain GrantRequest // without this method
	p := plain(req)
	redact.Format(f, verb, &p, &p.Secret)
}

// Format prints req with its secret redacted, as [GrantRequest.Format].
func (req RenewRequest) Format(f fmt.State, verb rune) {
	type plain RenewRequest
	p := plain(req)
	redact.Format(f, verb, &p, &p.Secret)
}

// Format prints req with its secret redacted, as [GrantRequest.Format].
func (req ReleaseRequest) Format(f fmt.State, verb rune) {
	type plain ReleaseRequest
	p := plain(req)
	redact.Format(f, verb, &p, &p.Secret)
}

// GetRequest is the body of lease.v1.get.
type GetRequest struct {
	Name string `json:"name"`
}

// ListRequest is the body of lease.v1.list.
//
// Without Limit the reply holds every live lease under Prefix, or is
// refused too_large if that exceeds the NATS server's max payload. With
// Limit it holds at most that many, in name order after After, fewer if
// more would not fit in one message, and More says whether any were left
// out: send again with After set to the last name returned. Each page is
// a read of its own, so a lease granted or ended between pages shows as
// it was when its page was read (one granted under a name before After is
// not seen). CountOnly asks for Count alone.
type ListRequest struct {
	Prefix    string `json:"prefix,omitempty"`
	After     string `json:"after,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	CountOnly bool   `json:"count_only,omitempty"`
}

// RevokeRequest is the body of lease.admin.v1.revoke.
type RevokeRequest struct {
	Name   string `json:"name"`
	Reason string `json:"reason,omitempty"`
	// FreeNow frees the lease at once instead of holding it until the
	// revoked holder's deadline has passed (kvlease.FreeNow).
	FreeNow bool `json:"free_now,omitempty"`
	// Token, if set, is the tenure to revoke (kvlease.OnlyTenure): if
	// another tenure holds the lease by now, or a revocation of another
	// holds it back, nothing is revoked and the reply is not_found.
	Token uint64 `json:"token,omitempty"`
}

// FreedHold is the reply to a free_now revocation of a lease that an
// earlier revocation held: no record ended, only the hold, so it names
// the revoked tenure and nothing a live lease has (a client reading the
// Lease fields of it gets zeros).
type FreedHold struct {
	Name       string    `json:"name"`
	Holder     string    `json:"holder"`
	Token      uint64    `json:"token"`
	ServerTime time.Time `json:"server_time"`
	Node       string    `json:"node,omitempty"`
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
	// RequestID is the request_id of the grant that began the tenure.
	RequestID string `json:"request_id,omitempty"`
	// GrantTrace is the W3C traceparent of the span that granted the
	// tenure (empty if it was not traced): a holder links its own spans
	// of the tenure (renewals, release) to it.
	GrantTrace string `json:"grant_trace,omitempty"`
	// Recovered is set in the reply to a retried grant answered with the
	// tenure an earlier attempt of the same request made.
	Recovered bool `json:"recovered,omitempty"`
	// ServerTime is the grantor's wall clock when it replied.
	ServerTime time.Time `json:"server_time"`
	// Node names the grantor node that replied (its WithNodeName, `serve
	// --name`), whose clock ServerTime is; empty if it has no name.
	Node string `json:"node,omitempty"`
	// Flapping is set in list replies for a lease granted anew (to any
	// holder) more often than the grantor's flapping threshold allows.
	Flapping bool `json:"flapping,omitempty"`
	// HeldBackMS is set in the reply to a revocation without free_now: the
	// lease stays held, no grant allowed, for about this long from
	// ServerTime (until the revoked holder's deadline has passed). A
	// grantor older than the revocation hold does not set it: it freed
	// the lease at once.
	HeldBackMS int64 `json:"held_back_ms,omitempty"`
}

// Format prints l with its secret (a grant's reply's) redacted, as
// [GrantRequest.Format].
func (l Lease) Format(f fmt.State, verb rune) {
	type plain Lease
	p := plain(l)
	redact.Format(f, verb, &p, &p.Secret)
}

// ListReply is the body of a lease.v1.list reply.
type ListReply struct {
	Leases []Lease `json:"leases"`
	// Count is how many live leases are under the prefix, on every page
	// alike (not only this page's, and regardless of After).
	Count int `json:"count"`
	// More says that leases after the last one returned were left out.
	More bool `json:"more,omitempty"`
}

// LeaseOf is a lease record in its wire form (without the server's time).
func LeaseOf(r kvlease.Record) Lease {
	return Lease{
		Name: r.Name, Holder: r.Holder, Token: uint64(r.Token), Revision: r.Revision,
		TTL: Duration(r.Duration), ServerTTL: Duration(r.TTL),
		StoredAt: r.StoredAt, GrantedAt: r.GrantedAt, ExpiresAt: r.ExpiresAt(),
		Attributes: r.Attributes, Secret: r.Secret, RequestID: r.RequestID, GrantTrace: r.GrantTrace, Recovered: r.Recovered,
	}
}

// Record is l as a kvlease record (what a client hands its holders).
func (l Lease) Record() kvlease.Record {
	return kvlease.Record{
		Name: l.Name, Holder: l.Holder, Token: kvlease.Token(l.Token), Revision: l.Revision,
		Duration: time.Duration(l.TTL), TTL: time.Duration(l.ServerTTL),
		StoredAt: l.StoredAt, GrantedAt: l.GrantedAt, Attributes: l.Attributes, Secret: l.Secret,
		RequestID: l.RequestID, GrantTrace: l.GrantTrace, Recovered: l.Recovered,
	}
}

// ChangeEvent is what the service publishes on SubjectEvents+<name> when a
// tenure begins or ends (renewals are not published).
type ChangeEvent struct {
	Type     string    `json:"type"` // granted, released, revoked, expired
	Name     string    `json:"name"`
	Holder   string    `json:"holder,omitempty"`
	Token    uint64    `json:"token,omitempty"`
	Revision uint64    `json:"revision"`
	Time     time.Time `json:"time"`
	Reason   string    `json:"reason,omitempty"`
}

// EndpointStats are the service's own counts for one endpoint, in the data
// of the micro stats reply (`nats micro info leased` prints it; or request
// $SRV.STATS.leased): micro's num_errors counts only errors answered before
// a handler returns, and the service answers from other goroutines.
type EndpointStats struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// ErrorsByCode counts the error replies by their wire code.
	ErrorsByCode map[string]int64 `json:"errors_by_code,omitempty"`
	// LastError is the code of the last error reply (not its message,
	// which may name leases and holders).
	LastError string `json:"last_error,omitempty"`
}

// Decode reads a JSON request strictly: unknown fields are errors, so a
// misspelt field is not silently ignored, and an empty body is "{}". Its
// errors wrap [ErrInvalidRequest].
func Decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		data = []byte("{}")
	}
	if f, ok := v.(fastDecoder); ok && f.decodeFast(data) {
		return nil
	}
	return decodeStrict(data, v)
}

// decodeStrict is Decode by encoding/json.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON object", ErrInvalidRequest)
	}
	return nil
}

// ReplySubjectOK reports whether the service may publish its reply on
// subject, a request's reply subject: one that begins with one of inboxes
// (the prefixes callers' inboxes begin with; [DefaultInboxPrefixes] if
// none), names no wildcard, and none of the service's own subjects. The
// service publishes as its own NATS user, which writes the lease bucket,
// the history and the change events, and may publish where its callers
// may not: a reply subject elsewhere would have it write a reply as data
// for a caller that may not (a reply written into $KV.<bucket>.<name>
// ended that lease's tenure without its secret; one on orders.new put a
// message into another application's stream). Such a request is dropped
// unanswered.
func ReplySubjectOK(subject string, inboxes []string) bool {
	if len(inboxes) == 0 {
		inboxes = DefaultInboxPrefixes
	}
	for _, p := range reservedReplyPrefixes {
		if strings.HasPrefix(subject, p) {
			return false
		}
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" {
			return false
		}
	}
	for _, p := range inboxes {
		if strings.HasPrefix(subject, p) {
			return true
		}
	}
	return false
}

// DefaultInboxPrefixes are the prefixes a reply subject may begin with
// unless the service is told others: nats.go's default inbox (_INBOX.) and
// every custom one of the form docs/api.md gives (_INBOX_app.).
var DefaultInboxPrefixes = []string{"_INBOX"}

// ServiceImportReplyPrefix begins the reply subject of a request that came
// through a service import from another NATS account: nats-server replaces
// the caller's with one of its own, _R_.…, and routes the reply back. It
// is not among [DefaultInboxPrefixes]: the reply goes on to whatever
// subject the caller named in its own account, where its permissions do
// not apply (docs/api.md, Revoke).
const ServiceImportReplyPrefix = "_R_."

// reservedReplyPrefixes begin the subjects ReplySubjectOK refuses: NATS's
// own ($JS, $KV, $SYS, $SRV …), the lease service's and its change events
// (lease.), the registry's (svc.) and the history's (leased.).
var reservedReplyPrefixes = []string{"$", "lease.", "svc.", "leased."}
