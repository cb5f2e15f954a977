package kvlease

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/leased/leased/kvlease/redact"
)

// Token is a fencing token: the KV revision at which a tenure began. It is
// stable across the tenure's renewals (like etcd's CreateRevision or Chubby's
// lock generation) and every later tenure of any lease in the same bucket
// gets a higher one, because revisions are the bucket stream's sequence
// numbers. Resources compare tokens, never holders (see [github.com/leased/leased/kvlease/fence]).
type Token uint64

// Record is the grantor's view of a live lease.
type Record struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	// Token is the revision of the grant that began this tenure.
	Token Token `json:"token"`
	// Revision is the current revision: the compare-and-set handle for the
	// next renewal or release. Equal to Token until the first renewal.
	Revision uint64 `json:"revision"`
	// Duration is the duration the holder asked for (D).
	Duration time.Duration `json:"duration"`
	// TTL is what the server keeps the key for: [ServerTTL](D, grantor margin).
	TTL time.Duration `json:"ttl"`
	// StoredAt is the server's wall-clock time of this revision; the server
	// lapses the key at StoredAt + TTL by its own clock (or up to ~250 ms
	// later). In records returned by Grant and Renew, whose acknowledgements
	// carry no time, it is the local time the acknowledgement arrived.
	StoredAt time.Time `json:"stored_at"`
	// GrantedAt is the server time of the grant that began the tenure; in
	// the record Grant returns, like StoredAt, the local time its
	// acknowledgement arrived (reads, the history and a recovered grant
	// give the server's, which differs by the clocks' offset and the
	// round trip: a fraction of a millisecond on one node).
	GrantedAt time.Time `json:"granted_at"`
	// Attributes are the holder's key/value annotations, set at grant.
	Attributes map[string]string `json:"attributes,omitempty"`
	// Secret is the holder's proof of ownership, known only to the holder:
	// set in the record a grant returns (if the grant had one), empty in
	// every record read back. The bucket stores only its hash.
	Secret string `json:"-"`

	secretHash string
	// GrantTrace is the traceparent of the span that granted the tenure.
	GrantTrace string `json:"grant_trace,omitempty"`
	// RequestID is the request ID of the grant that began the tenure, if
	// it had one ([GrantRequest].RequestID).
	RequestID string `json:"request_id,omitempty"`
	// Recovered is set in the record Grant returns for a retried request
	// whose tenure an earlier attempt had already made: the same tenure
	// (same token), at its current revision.
	Recovered bool `json:"recovered,omitempty"`
}

// Format prints r as fmt would, but with its secret (and the secret's
// hash) redacted: a record logged with %v or %+v gave its holder's proof
// of ownership away (found by an outside client).
func (r Record) Format(f fmt.State, verb rune) {
	type plain Record // without this method
	p := plain(r)
	redact.Format(f, verb, &p, &p.Secret, &p.secretHash)
}

// Format prints req as fmt would, but with its secret redacted: a
// Grantor that logs what it is handed gave the holder's proof of
// ownership away (found by an outside client). So do RenewRequest's and
// ReleaseRequest's.
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

// ExpiresAt is when the server will lapse this revision, by the server's clock.
func (r Record) ExpiresAt() time.Time { return r.StoredAt.Add(r.TTL) }

// Remaining estimates how long until the server lapses the key, measured
// with the local wall clock against the server's timestamps; it is a hint for
// display, off by the clock offset between the two machines.
func (r Record) Remaining(now time.Time) time.Duration { return r.ExpiresAt().Sub(now) }

// value is the JSON stored in the bucket. A grant does not know its own
// revision before it is stored, so a grant's value has Token 0 and the token
// is the revision; renewals carry the token and grant time forward.
type value struct {
	Holder     string            `json:"holder"`
	Token      Token             `json:"token,omitempty"`
	DurationMS int64             `json:"duration_ms"`
	GrantedAt  *time.Time        `json:"granted_at,omitempty"`
	Attributes map[string]string `json:"attrs,omitempty"`
	SecretHash string            `json:"sh,omitempty"`
	// Trace is the W3C traceparent of the grant's span: renewals and the
	// observed end of the tenure link to it, so a tenure is one short trace
	// plus linked spans, and nothing is lost if the holder crashes.
	Trace string `json:"tp,omitempty"`
	// RequestID is the grant's request ID, carried forward by renewals, so
	// that a retry of the grant finds its tenure at any revision.
	RequestID string `json:"rid,omitempty"`
}

// hashSecret returns the hex SHA-256 of a grant secret ("" for none).
func hashSecret(secret string) string {
	if secret == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// secretMatches reports whether secret proves ownership of r: always true
// for a tenure granted without a secret.
func (r Record) secretMatches(secret string) bool {
	if r.secretHash == "" {
		return true
	}
	// On the stack: every renewal and release checks its secret.
	var h [2 * sha256.Size]byte
	var in [MaxSecretLen]byte // a longer one is not valid, and is copied to the heap
	sum := sha256.Sum256(append(in[:0], secret...))
	hex.Encode(h[:], sum[:])
	if len(r.secretHash) != len(h) {
		return false
	}
	var want [2 * sha256.Size]byte
	copy(want[:], r.secretHash)
	return subtle.ConstantTimeCompare(h[:], want[:]) == 1
}

func (v value) encode() []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // a struct of strings and numbers always marshals
	}
	return b
}

// decodeRecord builds a Record from a stored put. ttl is the message's TTL.
func decodeRecord(name string, rev uint64, stored time.Time, ttl time.Duration, data []byte) (Record, error) {
	var v value
	if err := json.Unmarshal(data, &v); err != nil {
		return Record{}, fmt.Errorf("%w: revision %d of %q is not a lease record: %v", ErrBucket, rev, name, err)
	}
	// A token is the revision of an earlier (or this) put: one above rev
	// would be handed to holders and fences as a token from the future, and
	// every real tenure after it would look stale.
	if uint64(v.Token) > rev {
		return Record{}, fmt.Errorf("%w: revision %d of %q claims token %d, above its own revision", ErrBucket, rev, name, v.Token)
	}
	if v.DurationMS < 0 || v.DurationMS > int64(math.MaxInt64/time.Millisecond) {
		return Record{}, fmt.Errorf("%w: revision %d of %q has duration %d ms, not a duration", ErrBucket, rev, name, v.DurationMS)
	}
	r := Record{
		Name:       name,
		Holder:     v.Holder,
		Token:      v.Token,
		Revision:   rev,
		Duration:   time.Duration(v.DurationMS) * time.Millisecond,
		TTL:        ttl,
		StoredAt:   stored,
		GrantedAt:  stored,
		Attributes: v.Attributes,
		secretHash: v.SecretHash,
		GrantTrace: v.Trace,
		RequestID:  v.RequestID,
	}
	if r.Token == 0 {
		r.Token = Token(rev)
	}
	if v.GrantedAt != nil {
		r.GrantedAt = *v.GrantedAt
	}
	return r, nil
}
