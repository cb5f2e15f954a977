package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// rawGrantor is leased bench's baseline (--raw): each grant, renewal and
// release is the one single-message JetStream KV write it comes down to,
// sent at once, with none of kvlease.Store's work around it (no read, no
// revision cache, no group commit, no request IDs, no tracing): a grant
// is a create with the lease's TTL, a renewal a publish expecting the
// last revision with the TTL, a release a purge expecting it whose
// tombstone lapses as the Store's do (kvlease.DefaultMarkerTTL). Its values
// are lease records that watchers (and a running service's observer)
// read as such. It is what group commit is measured against: the
// ratio of --direct to --raw on the same deployment, run after run, is
// what batching buys there.
type rawGrantor struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	prefix string // $KV.<bucket>.
}

var _ kvlease.Grantor = (*rawGrantor)(nil)

// openRaw opens the baseline on an existing lease bucket, as openStore
// opens the lease store.
func (c *connFlags) openRaw(ctx context.Context, nc *nats.Conn, bucket string) (*rawGrantor, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("%w: bucket %q does not exist", kvlease.ErrBucket, bucket)
		}
		return nil, fmt.Errorf("%w: open bucket %q: %w", kvlease.ErrUnavailable, bucket, err)
	}
	return &rawGrantor{js: js, kv: kv, prefix: "$KV." + bucket + "."}, nil
}

// rawValue is the JSON of a lease record (kvlease's stored value), the
// fields a reader needs.
type rawValue struct {
	Holder     string `json:"holder"`
	Token      uint64 `json:"token,omitempty"`
	DurationMS int64  `json:"duration_ms"`
}

func (v rawValue) encode() []byte {
	b, _ := json.Marshal(v) // strings and numbers: never fails
	return b
}

func rawTTL(d time.Duration) time.Duration { return kvlease.ServerTTL(d, kvlease.DefaultGrantorMargin) }

func (g *rawGrantor) Grant(ctx context.Context, req kvlease.GrantRequest) (kvlease.Record, error) {
	ttl := rawTTL(req.Duration)
	rev, err := g.kv.Create(ctx, req.Name, rawValue{Holder: req.Holder, DurationMS: req.Duration.Milliseconds()}.encode(),
		jetstream.KeyTTL(ttl))
	if err != nil {
		return kvlease.Record{}, rawError(err, kvlease.ErrHeld)
	}
	now := time.Now()
	return kvlease.Record{Name: req.Name, Holder: req.Holder, Token: kvlease.Token(rev), Revision: rev,
		Duration: req.Duration, TTL: ttl, StoredAt: now, GrantedAt: now, Secret: req.Secret}, nil
}

func (g *rawGrantor) Renew(ctx context.Context, req kvlease.RenewRequest) (kvlease.Record, error) {
	ttl := rawTTL(req.Duration)
	v := rawValue{Holder: req.Holder, Token: uint64(req.Token), DurationMS: req.Duration.Milliseconds()}
	ack, err := g.js.PublishMsg(ctx, &nats.Msg{Subject: g.prefix + req.Name, Data: v.encode()},
		jetstream.WithExpectLastSequencePerSubject(req.Revision), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return kvlease.Record{}, rawError(err, kvlease.ErrStaleRevision)
	}
	return kvlease.Record{Name: req.Name, Holder: req.Holder, Token: req.Token, Revision: ack.Sequence,
		Duration: req.Duration, TTL: ttl, StoredAt: time.Now()}, nil
}

func (g *rawGrantor) Release(ctx context.Context, req kvlease.ReleaseRequest) error {
	// The tombstone lapses, as the Store's: without a TTL every lease a
	// --raw or --compare run released left one in the bucket for good
	// (found by an outside client).
	err := g.kv.Purge(ctx, req.Name, jetstream.LastRevision(req.Revision), jetstream.PurgeTTL(kvlease.DefaultMarkerTTL))
	return rawError(err, kvlease.ErrStaleRevision)
}

// rawError gives a failed expectation (the key exists, or has moved on)
// the kind the Store would give it: refused.
func rawError(err, refused error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch),
		errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return fmt.Errorf("%w: %w", refused, err)
	}
	return err
}
