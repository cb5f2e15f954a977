package kvcas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// OpenBucket opens the KV bucket cfg names, creating it with cfg if it is
// missing. An existing bucket is opened as it is: its replicas and the rest
// of its configuration are its owner's to change (an open with the default
// of one replica made R3 buckets R1; found by an outside client). op names
// it in errors. With keep (a bucket whose entries must stay: a fence's
// tokens, a work queue's results), an existing bucket whose entries
// expire otherwise than cfg.TTL says (the lease bucket, say, or a queue's
// results kept for another time) is refused with [kvlease.ErrBucket].
func OpenBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig, keep bool, op string) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, cfg)
		if errors.Is(err, jetstream.ErrBucketExists) { // made meanwhile by another
			kv, err = js.KeyValue(ctx, cfg.Bucket)
		}
	}
	if err != nil {
		return nil, kvlease.JetStreamError(op, err)
	}
	if keep {
		// A bucket that expires its entries would forget what it keeps (a
		// fence's highest token: a stale writer accepted). The lease
		// bucket is one: a fence opened on it took a write, which then
		// showed as a lease held by "" that never lapsed (found by an
		// outside client).
		st, err := kv.Status(ctx)
		if err != nil {
			return nil, kvlease.JetStreamError(op, err)
		}
		switch {
		case st.LimitMarkerTTL() > 0:
			return nil, fmt.Errorf("%w: %s: bucket %q expires its entries (per-key TTLs); this one must keep them (is it the lease bucket?)",
				kvlease.ErrBucket, op, cfg.Bucket)
		case st.TTL() != cfg.TTL:
			return nil, fmt.Errorf("%w: %s: bucket %q keeps its entries for %v, not %v (0: for good); open it with the retention it was made with (a work queue's WithResultRetention), or change the bucket's max age",
				kvlease.ErrBucket, op, cfg.Bucket, st.TTL(), cfg.TTL)
		}
	}
	return kv, nil
}

// Doc is the document type V stored as JSON under each key of KV.
type Doc[V any] struct {
	KV jetstream.KeyValue
	JS jetstream.JetStream // KV's, for reads through its stream's leader
	// ReadOp and WriteOp name the reads and writes in errors ("fence
	// read"); Corrupt names an undecodable value ("fence: value").
	ReadOp, WriteOp, Corrupt string
}

// Get returns key's document and its revision, or the zero V and revision
// 0 if key has none. It reads through the stream's leader
// ([kvlease.LeaderLast]): what it returns was the latest when read, on
// any number of replicas.
//
// Errors: [kvlease.ErrUnavailable]; [kvlease.ErrBucket] (also for a
// document that does not decode).
func (d Doc[V]) Get(ctx context.Context, key string) (v V, rev uint64, err error) {
	v, rev, removed, err := d.read(ctx, key)
	if removed {
		rev = 0
	}
	return v, rev, err
}

// read is Get that also returns the revision of a key's delete or purge
// marker (removed true, with the zero V): a write over it names that
// revision (a create would be checked by a direct get, which a lagging
// replica answers with the value the marker removed, and Update would
// try again until it caught up; found in review).
func (d Doc[V]) read(ctx context.Context, key string) (v V, rev uint64, removed bool, err error) {
	bucket := d.KV.Bucket()
	m, err := kvlease.LeaderLast(ctx, d.JS, kvlease.StreamName(bucket), "$KV."+bucket+"."+key)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return v, 0, false, nil
	case err != nil:
		return v, 0, false, kvlease.JetStreamError(d.ReadOp, err)
	case kvlease.Removed(m.Header):
		return v, m.Sequence, true, nil
	}
	if err := json.Unmarshal(m.Data, &v); err != nil {
		var zero V
		// Typed as the lease core types a record that is not one: the
		// caller could not tell it from an outage (found in review).
		return zero, 0, false, fmt.Errorf("%w: %s of %q is corrupt: %w", kvlease.ErrBucket, d.Corrupt, key, err)
	}
	return v, m.Sequence, false, nil
}

// Update replaces key's document with what decide makes of the current one
// (the zero V if there is none), by a compare-and-set on the revision it
// read. If another writer got there first it reads the document
// again and asks decide again, until the write lands, decide fails, or ctx
// ends.
//
// Errors: decide's (nothing is written); Get's; [kvlease.ErrUnavailable].
func (d Doc[V]) Update(ctx context.Context, key string, decide func(cur V) (V, error)) error {
	for {
		if err := ctx.Err(); err != nil {
			return kvlease.JetStreamError(d.WriteOp, err)
		}
		cur, rev, _, err := d.read(ctx, key)
		if err != nil {
			return err
		}
		next, err := decide(cur)
		if err != nil {
			return err
		}
		b, err := json.Marshal(next)
		if err != nil {
			return fmt.Errorf("kvcas: encode the document of %q: %w", key, err)
		}
		if rev == 0 {
			_, err = d.KV.Create(ctx, key, b)
		} else {
			_, err = d.KV.Update(ctx, key, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // someone wrote in between: decide again
		}
		if err != nil {
			return kvlease.JetStreamError(d.WriteOp, err)
		}
		return nil
	}
}
