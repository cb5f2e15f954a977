package fence

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/internal/kvcas"
	"github.com/leased/leased/telemetry"
)

// Mem is an in-process fence. The zero value is ready to use.
type Mem struct {
	// Metrics, if set, counts rejections ([telemetry.MetricFenceRejections]).
	Metrics *telemetry.Metrics

	mu        sync.Mutex
	resources map[string]*fencedResource
	rejected  atomic.Int64
}

type fencedResource struct {
	mu      sync.Mutex
	highest kvlease.Token
}

func (f *Mem) resource(name string) *fencedResource {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.resources == nil {
		f.resources = make(map[string]*fencedResource)
	}
	r, ok := f.resources[name]
	if !ok {
		r = &fencedResource{}
		f.resources[name] = r
	}
	return r
}

// Do runs effect if token is at least the highest token accepted for
// resource, and records token as accepted if effect succeeds. Calls for the
// same resource are serialized (calls for different resources are not), so
// the check and the effect are atomic. A nil effect only raises the bar.
//
// Errors: [ErrInvalidToken] for token 0 or one above math.MaxInt64
// (nothing done); [*StaleTokenError]; effect's error.
func (f *Mem) Do(resource string, token kvlease.Token, effect func() error) error {
	if err := checkToken(token); err != nil {
		return err
	}
	r := f.resource(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		f.rejected.Add(1)
		f.Metrics.StaleTokenRejected(context.Background(), resource)
		return &StaleTokenError{Resource: resource, Token: token, Highest: r.highest}
	}
	if effect != nil {
		if err := effect(); err != nil {
			return err
		}
	}
	r.highest = token
	return nil
}

// Highest returns the highest token accepted for resource (0 if none).
// It adds nothing: a look at a resource never written made it an entry
// for good (found in review).
func (f *Mem) Highest(resource string) kvlease.Token {
	f.mu.Lock()
	r, ok := f.resources[resource]
	f.mu.Unlock()
	if !ok {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Rejected counts refused tokens.
func (f *Mem) Rejected() int64 { return f.rejected.Load() }

// KV is a fence shared by processes: each resource is a key in a
// JetStream KV bucket holding the resource's value and the token that wrote
// it, and a write is a compare-and-set on the key's revision. Use it when the
// protected resource is that value, or as the gate in front of a resource
// that has no fence of its own (then the gate and the resource can still be
// raced; prefer a fence inside the resource).
type KV struct {
	// Metrics, if set, counts rejections ([telemetry.MetricFenceRejections]).
	Metrics *telemetry.Metrics

	doc      kvcas.Doc[Value]
	rejected atomic.Int64
}

// Value is what a [KV] fence stores per resource.
type Value struct {
	Token kvlease.Token `json:"token"`
	Data  []byte        `json:"data"`
}

// KVOption configures [OpenKV]. An option returns an error for a value it
// cannot use; OpenKV returns that error.
type KVOption func(*kvOptions) error

type kvOptions struct{ replicas int }

// WithReplicas sets the replica count of a fence bucket OpenKV creates: 1
// on a single server (the default), 3 on a cluster; an existing bucket
// keeps its own. A count outside 1..5 (JetStream's range) is an error.
func WithReplicas(n int) KVOption {
	return func(o *kvOptions) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d outside 1..5", kvlease.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}

// OpenKV opens (creating if missing) a fence bucket. It is an ordinary
// KV bucket with history 1 and no TTLs, replicated as [WithReplicas] says.
//
// Errors: [kvlease.ErrInvalidOption] (nothing sent); [kvlease.ErrUnavailable];
// [kvlease.ErrBucket] (also for an existing bucket whose entries expire,
// such as the lease bucket: a fence must keep its highest tokens).
func OpenKV(ctx context.Context, js jetstream.JetStream, bucket string, opts ...KVOption) (*KV, error) {
	o := kvOptions{replicas: 1}
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil fence option", kvlease.ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if js == nil {
		return nil, fmt.Errorf("%w: nil JetStream", kvlease.ErrInvalidOption)
	}
	if err := kvlease.ValidateBucket(bucket); err != nil {
		return nil, err // a name the server refuses, not an outage
	}
	kv, err := kvcas.OpenBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "leased: fenced resources (value + last accepted token)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    o.replicas,
	}, true, "open fence bucket")
	if err != nil {
		return nil, err
	}
	return &KV{doc: kvcas.Doc[Value]{KV: kv, JS: js, ReadOp: "fence read", WriteOp: "fenced write", Corrupt: "fence: value"}}, nil
}

// Write stores data for resource if token is at least the token of the
// current value, atomically (compare-and-set; retried if another writer with
// an acceptable token got there first).
//
// Errors: [kvlease.ErrInvalidName]; [ErrInvalidToken] (0, or above what
// the fence stores); [*StaleTokenError]; [kvlease.ErrTooLarge] (the value
// over the server's max_payload, nothing sent: it is JSON with data
// base64-encoded, so data may be about ¾ of max_payload);
// [kvlease.ErrUnavailable]; [kvlease.ErrBucket] for a stored value that
// is not a fence's (nothing written).
func (f *KV) Write(ctx context.Context, resource string, token kvlease.Token, data []byte) error {
	return f.update(ctx, resource, token, func(Value) []byte { return data })
}

// Raise raises resource's fence to token, keeping its data, if token is
// at least the token it stores: from then on every Write with a lower
// token is refused. Call it as the lease is taken, before the work, when
// the work must take effect once (docs/fencing.md): fenced only at the
// Write, a late holder's write that comes before its successor's first
// is accepted. A resource never written reads, once raised, as token with
// no data.
//
// Errors: as [KV.Write]'s.
func (f *KV) Raise(ctx context.Context, resource string, token kvlease.Token) error {
	return f.update(ctx, resource, token, func(cur Value) []byte { return cur.Data })
}

// update stores token, with the data data gives for the current value,
// if token is at least the token the resource stores (Write, Raise).
func (f *KV) update(ctx context.Context, resource string, token kvlease.Token, data func(cur Value) []byte) error {
	if err := validResource(resource); err != nil {
		return err
	}
	if err := checkToken(token); err != nil {
		return err
	}
	return f.doc.Update(ctx, resource, func(cur Value) (Value, error) {
		if token < cur.Token {
			f.rejected.Add(1)
			f.Metrics.StaleTokenRejected(ctx, resource)
			return cur, &StaleTokenError{Resource: resource, Token: token, Highest: cur.Token}
		}
		return Value{Token: token, Data: data(cur)}, nil
	})
}

// Read returns the resource's value and the token that wrote it.
//
// Errors: [kvlease.ErrNotFound]; [kvlease.ErrUnavailable];
// [kvlease.ErrBucket] for a stored value that is not a fence's.
func (f *KV) Read(ctx context.Context, resource string) (Value, error) {
	if err := validResource(resource); err != nil {
		return Value{}, err
	}
	v, rev, err := f.doc.Get(ctx, resource)
	if err == nil && rev == 0 {
		err = noValueError(resource)
	}
	return v, err
}

// noValueError is Read's [kvlease.ErrNotFound] for a resource that has no
// value, said as a resource's: wrapped, the sentinel's own text called it
// a lease ("kvlease: lease not found: no value for …").
type noValueError string

func (e noValueError) Error() string {
	return fmt.Sprintf("fence: resource %q not found: no value written (or none kept)", string(e))
}

func (e noValueError) Is(target error) bool { return target == kvlease.ErrNotFound }

// validResource refuses a resource name that could not be a key: it
// follows the lease names' rules, and the error says it is the resource's.
func validResource(resource string) error {
	if err := kvlease.ValidateName(resource); err != nil {
		return fmt.Errorf("fence: resource name (named as leases are): %w", err)
	}
	return nil
}

// Rejected counts refused tokens.
func (f *KV) Rejected() int64 { return f.rejected.Load() }

// checkToken refuses, as every fence does, a token no tenure has: 0
// (revisions begin at 1; a caller that passes it has no lease), or one
// above the largest bigint (fence.SQL's column; no bucket gets there). A
// fence that took such a token would refuse every real one after it,
// for good (fence.Mem and fence.KV took it; found by an outside client).
func checkToken(token kvlease.Token) error {
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("%w: %d, want 1..%d", ErrInvalidToken, token, int64(math.MaxInt64))
	}
	return nil
}
