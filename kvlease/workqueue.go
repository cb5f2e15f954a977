package kvlease

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WorkQueue hands out work items under processing leases: a worker claims
// the next pending item (a lease "claim.<queue>.<item>"), keeps the claim
// renewed while it works, and completes the item with the claim's token. A
// crashed worker's claim lapses and another worker takes the item; a
// completion with a stale token is refused.
//
// Why leases on KV keys and not JetStream's own work queue (AckWait,
// in-progress acks, delivery counts): the same machinery would need the same
// fence anyway, since a late ack from a paused worker is accepted by the
// server after redelivery; and on KV the claim is an ordinary lease, with the
// holder-side deadline, the keeper, the token and the telemetry every other
// lease has.
//
// Three buckets: the items ("<queue>-items": pending work, deleted when
// done), the leases (claims), and the sink ("<queue>-done", one record per
// item holding the highest claim token seen and the result). The sink is the
// fence: a claim raises its bar first, and a completion is a compare-and-set
// that needs the bar at the claim's own token and the item not yet done, so
// each item is completed exactly once, by a current claim.
type WorkQueue struct {
	name  string
	store *Store
	items jetstream.KeyValue
	done  jetstream.KeyValue

	// Per-item state holds only what is live: an item leaves pending when
	// it is deleted from the items bucket (completed), and claimed when its
	// claim ends (completion, release or lapse).
	mu      sync.Mutex
	pending map[string]bool // items pending (from the items bucket)
	claimed map[string]bool // items with a live claim (from the lease bucket)
	changed chan struct{}   // closed and replaced on every change
	itemsW  jetstream.KeyWatcher
	claimsW *Watcher
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// ErrDone: the item was already completed.
var ErrDone = errors.New("kvlease: work item already completed")

type doneRecord struct {
	Token  Token  `json:"token"`
	Done   bool   `json:"done"`
	Worker string `json:"worker,omitempty"`
	Result []byte `json:"result,omitempty"`
}

// OpenWorkQueue opens (creating if missing) the queue's buckets and starts
// following its items and claims. Close it when done.
func OpenWorkQueue(ctx context.Context, js jetstream.JetStream, store *Store, name string, replicas int) (*WorkQueue, error) {
	if err := ValidateName(name); err != nil || strings.Contains(name, ".") {
		return nil, fmt.Errorf("%w: queue name %q (no dots)", ErrInvalidName, name)
	}
	open := func(bucket string) (jetstream.KeyValue, error) {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
			Storage: jetstream.FileStorage, Replicas: replicas})
		if err != nil {
			return nil, translate("open "+bucket, err)
		}
		return kv, nil
	}
	q := &WorkQueue{name: name, store: store, pending: map[string]bool{}, claimed: map[string]bool{},
		changed: make(chan struct{})}
	var err error
	if q.items, err = open(name + "-items"); err != nil {
		return nil, err
	}
	if q.done, err = open(name + "-done"); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	q.stop = cancel
	if q.itemsW, err = q.items.WatchAll(wctx, jetstream.MetaOnly()); err != nil {
		cancel()
		return nil, translate("watch items", err)
	}
	if q.claimsW, err = store.Watch(wctx, q.claimPrefix()); err != nil {
		cancel()
		return nil, err
	}
	q.wg.Add(2)
	go q.followItems()
	go q.followClaims()
	return q, nil
}

func (q *WorkQueue) claimPrefix() string { return "claim." + q.name + "." }

// Close stops following the queue.
func (q *WorkQueue) Close() {
	q.stop()
	_ = q.itemsW.Stop()
	q.claimsW.Stop()
	q.wg.Wait()
}

func (q *WorkQueue) update(fn func()) {
	q.mu.Lock()
	fn()
	close(q.changed)
	q.changed = make(chan struct{})
	q.mu.Unlock()
}

func (q *WorkQueue) followItems() {
	defer q.wg.Done()
	for e := range q.itemsW.Updates() {
		if e == nil {
			continue // end of the initial values
		}
		q.update(func() {
			if e.Operation() == jetstream.KeyValuePut {
				q.pending[e.Key()] = true
			} else {
				delete(q.pending, e.Key())
			}
		})
	}
}

func (q *WorkQueue) followClaims() {
	defer q.wg.Done()
	for ev := range q.claimsW.Events() {
		item := strings.TrimPrefix(ev.Name, q.claimPrefix())
		q.update(func() {
			if ev.Type.Ends() {
				delete(q.claimed, item)
			} else {
				q.claimed[item] = true
			}
		})
	}
}

// Add puts an item on the queue. Errors: [ErrInvalidName]; [ErrHeld] if an
// item of that id is pending; [ErrDone] if it was completed (ids are not
// reused: the sink keeps each item's result).
func (q *WorkQueue) Add(ctx context.Context, id string, payload []byte) error {
	if err := ValidateName(id); err != nil {
		return err
	}
	if done, _, _, _, err := q.Result(ctx, id); err != nil {
		return err
	} else if done {
		return fmt.Errorf("%w: %q", ErrDone, id)
	}
	if _, err := q.items.Create(ctx, id, payload); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: item %q is pending", ErrHeld, id)
		}
		return translate("add item", err)
	}
	return nil
}

// Claim is a worker's claim on one item.
type Claim struct {
	*Keeper
	Item    string
	Payload []byte
	q       *WorkQueue
}

// Token returns the claim's fencing token.
func (c *Claim) Token() Token { return c.Lease().Token() }

// Claim blocks until worker holds a claim on a pending item, or ctx ends.
// It waits for new items and lapsed claims on the buckets' streams, without
// polling.
func (q *WorkQueue) Claim(ctx context.Context, worker string, d time.Duration, keepOpts ...KeeperOption) (*Claim, error) {
	for {
		q.mu.Lock()
		var candidates []string
		for id, p := range q.pending {
			if p && !q.claimed[id] {
				candidates = append(candidates, id)
			}
		}
		changed := q.changed
		q.mu.Unlock()
		rand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
		for _, id := range candidates {
			c, err := q.tryClaim(ctx, worker, id, d, keepOpts)
			if err == nil {
				return c, nil
			}
			if !errors.Is(err, ErrHeld) && !errors.Is(err, ErrDone) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrStaleToken) {
				return nil, err
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (q *WorkQueue) tryClaim(ctx context.Context, worker, id string, d time.Duration, keepOpts []KeeperOption) (*Claim, error) {
	l, err := Acquire(ctx, q.store, q.claimPrefix()+id, worker, d)
	if err != nil {
		// Held: the claims stream reports that claim (and its end), so the
		// item is not marked here, where a mark could outlive the claim.
		return nil, err
	}
	// Raise the sink's bar to this claim, so that any older claim's
	// completion is refused from now on.
	if err := q.sink(ctx, id, func(cur doneRecord) (doneRecord, error) {
		if cur.Done {
			return cur, ErrDone
		}
		return doneRecord{Token: l.Token()}, nil
	}, l.Token()); err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		if errors.Is(err, ErrDone) {
			_ = q.items.Purge(ctx, id) // completed, but its deletion was lost
		}
		return nil, err
	}
	e, err := q.items.Get(ctx, id)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			q.update(func() { delete(q.pending, id) })
			return nil, fmt.Errorf("%w: item %q", ErrNotFound, id)
		}
		return nil, translate("read item", err)
	}
	k, err := Keep(context.WithoutCancel(ctx), l, keepOpts...)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Claim{Keeper: k, Item: id, Payload: e.Value(), q: q}, nil
}

// sink applies fn to the item's sink record with a compare-and-set, if the
// record's token is at most token (else *StaleTokenError).
func (q *WorkQueue) sink(ctx context.Context, id string, fn func(doneRecord) (doneRecord, error), token Token) error {
	for {
		var cur doneRecord
		var rev uint64
		e, err := q.done.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return translate("read sink", err)
		default:
			if err := json.Unmarshal(e.Value(), &cur); err != nil {
				return fmt.Errorf("kvlease: sink record of %q is corrupt: %w", id, err)
			}
			rev = e.Revision()
		}
		if cur.Token > token {
			return &StaleTokenError{Resource: id, Token: token, Highest: cur.Token}
		}
		next, err := fn(cur)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(next)
		if rev == 0 {
			_, err = q.done.Create(ctx, id, b)
		} else {
			_, err = q.done.Update(ctx, id, b, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return translate("write sink", err)
		}
		return nil
	}
}

// Complete records the item's result at the sink, if this claim is still
// the item's newest and its holder deadline has not passed, then deletes the
// item and releases the claim.
//
// Errors: [*LeaseExpiredError] (nothing written; the claim will lapse and
// the item be redone); [*StaleTokenError] (a newer claim exists); [ErrDone].
func (c *Claim) Complete(ctx context.Context, result []byte) error {
	if err := c.Lease().Check(); err != nil {
		return err
	}
	token := c.Token()
	err := c.q.sink(ctx, c.Item, func(cur doneRecord) (doneRecord, error) {
		switch {
		case cur.Done:
			return cur, ErrDone
		case cur.Token != token:
			return cur, &StaleTokenError{Resource: c.Item, Token: token, Highest: cur.Token}
		}
		return doneRecord{Token: token, Done: true, Worker: c.Lease().Holder(), Result: result}, nil
	}, token)
	if err != nil {
		c.Stop()
		return err
	}
	if err := c.q.items.Purge(ctx, c.Item); err != nil {
		return translate("delete item", err)
	}
	return c.Close(ctx)
}

// Result returns an item's sink record: whether it is done, by which
// worker, with which token, and its result.
func (q *WorkQueue) Result(ctx context.Context, id string) (done bool, worker string, token Token, result []byte, err error) {
	e, err := q.done.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, "", 0, nil, nil
	}
	if err != nil {
		return false, "", 0, nil, translate("read sink", err)
	}
	var r doneRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return false, "", 0, nil, err
	}
	return r.Done, r.Worker, r.Token, r.Result, nil
}
