package workqueue

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/follow"
	"github.com/leased/leased/kvlease/internal/kvcas"
)

// Queue hands out work items under processing leases: a worker claims
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
// each item is completed at most once, and the sink refuses a claim's
// completion once a newer claim has raised the bar. Until then a lapsed
// claim can still complete (its worker paused between its check and the
// write); the next attempt to claim the item then finds it done.
type Queue struct {
	name  string
	store *kvlease.Store
	js    jetstream.JetStream // the buckets'
	items jetstream.KeyValue
	// removeTTL is the TTL of the markers of removed items (removalTTL).
	removeTTL time.Duration
	done      kvcas.Doc[doneRecord]
	maxClaims int // WithMaxClaims; 0: no bound

	// Per-item state holds only what is live: an item leaves pending when
	// it is deleted from the items bucket (completed), and claimed when its
	// claim ends (completion, release or lapse).
	mu      sync.Mutex
	pending map[string]bool // items pending (from the items bucket)
	claimed map[string]bool // items with a live claim (from the lease bucket)
	changed chan struct{}   // closed and replaced on every change
	itemsF  kvlease.Follow  // the items bucket, by key: puts and removals
	claimsW *kvlease.Watcher
	stop    context.CancelFunc
	closed  context.Context // ends when Close is called
	// broken ends, with the cause, when a follow of the buckets ends while
	// the queue is open (the connection closed, a bucket deleted or made
	// anew): the state above changes no more, and a Claim waiting on it
	// waited for good (found by an outside client, on a closed connection).
	broken   context.Context
	breakOff context.CancelCauseFunc
	wg       sync.WaitGroup

	beforeCreate func() // tests: called by Add between its check and its create
	afterRaise   func() // tests: called by Claim once it has raised an item's bar to its claim
	beforeGiveUp func() // tests: called by Claim as it decides to give an item up, before it writes that
}

// ErrDone: the item was already completed.
var ErrDone = errors.New("workqueue: item already completed")

// ErrGaveUp: the item was given up after as many claims as
// [WithMaxClaims] allows (see [GaveUpError]).
var ErrGaveUp = errors.New("workqueue: item given up")

// GaveUpError says that an item was given up (see [WithMaxClaims]): it was
// claimed Claims times without being completed. It wraps [ErrGaveUp].
type GaveUpError struct {
	Item   string
	Claims int
	// Payload is the item's, kept at the sink when it was given up (nil
	// if the payload did not fit in one message with the record).
	Payload []byte
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("workqueue: item %q given up after %d claims that did not complete it", e.Item, e.Claims)
}

func (e *GaveUpError) Unwrap() error { return ErrGaveUp }

// doneRecord is an item's sink record: the bar its claims raise (Token),
// how many claims raised it (Claims), and its end, if it has ended:
// completed with Result, or given up (GaveUp, with the item's Payload).
type doneRecord struct {
	Token   kvlease.Token `json:"token"`
	Done    bool          `json:"done"`
	Worker  string        `json:"worker,omitempty"`
	Result  []byte        `json:"result,omitempty"`
	Claims  int           `json:"claims,omitempty"`
	GaveUp  bool          `json:"gave_up,omitempty"`
	Payload []byte        `json:"payload,omitempty"`
}

// gaveUp is the error of a record given up, nil for any other.
func (r doneRecord) gaveUp(id string) error {
	if !r.GaveUp {
		return nil
	}
	return &GaveUpError{Item: id, Claims: r.Claims, Payload: r.Payload}
}

// Open opens (creating if missing) the queue's buckets, replicated as
// [WithReplicas] says (by default as the lease store's bucket), and starts
// following its items and claims. Close it when done. An items bucket
// made before its removal markers lapsed is updated to allow per-message
// TTLs; Open waits up to 2 s for that (at most half of what is left of
// ctx), and if the update is refused or not answered (a NATS user that may
// not update streams gets no answer), this Queue's markers stay for good.
//
// Open makes one attempt, unlike [kvlease.Open], which waits for
// JetStream: a cluster that has just started answers for the lease bucket
// while the queue's streams are still electing their leaders, and Open
// then returns [kvlease.ErrUnavailable] (a worker that opened its store
// and queue as a dev-cluster's nodes restarted got "watch items: context
// deadline exceeded" once its store had opened; found by an outside
// client). Open again after it, with [kvlease.RetryUnavailable] for
// instance.
//
// Errors: [kvlease.ErrInvalidName]; [kvlease.ErrInvalidOption] (nothing
// sent); [kvlease.ErrUnavailable]; [kvlease.ErrBucket] (also for an
// existing results bucket, NAME-done, whose entries expire, or that was
// made for the claims of another lease bucket than store's, and, nothing
// sent, for a queue whose bucket would be the lease store's).
func Open(ctx context.Context, js jetstream.JetStream, store *kvlease.Store, name string, opts ...OpenOption) (*Queue, error) {
	if js == nil || store == nil {
		return nil, fmt.Errorf("%w: workqueue.Open needs a JetStream and a store", kvlease.ErrInvalidOption)
	}
	if err := validQueueName(name); err != nil {
		return nil, err
	}
	oo, err := newOpenOptions(store, opts)
	if err != nil {
		return nil, err
	}
	// The lease bucket as the items bucket took each item as a raw value
	// there (the lease of its name unusable: "not a lease record"), and the
	// claims' records as items (found by an outside client).
	if b := store.Bucket(); b == name+"-items" || b == name+"-done" {
		return nil, fmt.Errorf("%w: queue %q: its bucket %q is the lease bucket", kvlease.ErrBucket, name, b)
	}
	// An item that expires is dropped as not found, but a result must stay.
	open := func(keep bool, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		cfg.History, cfg.Storage, cfg.Replicas = 1, jetstream.FileStorage, oo.replicas
		return kvcas.OpenBucket(ctx, js, cfg, keep, "open "+cfg.Bucket)
	}
	q := &Queue{name: name, store: store, js: js, pending: map[string]bool{}, claimed: map[string]bool{},
		changed: make(chan struct{}), maxClaims: oo.maxClaims}
	if q.items, err = open(false, jetstream.KeyValueConfig{Bucket: name + "-items", LimitMarkerTTL: itemMarkerTTL}); err != nil {
		return nil, err
	}
	if q.removeTTL, err = removalTTL(ctx, js, q.items.Bucket()); err != nil {
		return nil, err
	}
	done, err := open(true, jetstream.KeyValueConfig{Bucket: name + "-done", TTL: oo.resultRetention,
		Metadata: map[string]string{metaLeaseBucket: store.Bucket()}})
	if err != nil {
		return nil, err
	}
	if err := sameLeaseBucket(ctx, done, store.Bucket()); err != nil {
		return nil, err
	}
	q.done = kvcas.Doc[doneRecord]{KV: done, JS: js, ReadOp: "read sink", WriteOp: "write sink", Corrupt: "workqueue: sink record"}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	q.stop, q.closed = cancel, wctx
	q.broken, q.breakOff = context.WithCancelCause(context.Background())
	// Followed as the lease watches are, not with nats.go's KV watcher:
	// its consumer is made anew when the connection comes back or misses
	// two heartbeats (nats.go's watcher saw nothing for 6-8 s after its
	// server restarted, and Claims waited that long for new items).
	if q.itemsF, err = kvlease.StartFollow(ctx, "watch items", js, follow.Config{
		Stream: kvlease.StreamName(q.items.Bucket()), Filter: q.itemsPrefix() + ">", Deliver: jetstream.DeliverLastPerSubjectPolicy,
		Heartbeat: kvlease.WatchHeartbeat, HeadersOnly: true}); err != nil {
		cancel()
		return nil, err
	}
	if q.claimsW, err = store.Watch(wctx, q.claimPrefix(), kvlease.ReportFrees()); err != nil {
		cancel()
		q.itemsF.Stop()
		return nil, err
	}
	q.wg.Add(2)
	go q.followItems()
	go q.followClaims()
	return q, nil
}

func (q *Queue) claimPrefix() string { return "claim." + q.name + "." }

// metaLeaseBucket is the sink's stream metadata key that names the lease
// bucket of the queue's claims.
const metaLeaseBucket = "leased.workqueue.lease_bucket"

// sameLeaseBucket refuses, with [kvlease.ErrBucket], a sink made for the
// claims of another lease bucket than bucket. The claims are leases of
// one bucket and the sink compares their tokens: a worker whose store had
// another bucket held a claim on an item another worker held (tokens 1
// and 1 on two new buckets: both passed the sink's bar and any fence of
// the item), and its claims on items the other bucket's higher tokens had
// raised were refused for good (found by an outside client). A sink made
// before the bucket was recorded names none and is not checked.
func sameLeaseBucket(ctx context.Context, done jetstream.KeyValue, bucket string) error {
	st, err := done.Status(ctx)
	if err != nil {
		return kvlease.JetStreamError("open "+done.Bucket(), err)
	}
	if had, ok := st.Metadata()[metaLeaseBucket]; ok && had != bucket {
		return fmt.Errorf("%w: queue bucket %q holds the results of claims in the lease bucket %q, not %q: open the queue with a store of %q",
			kvlease.ErrBucket, done.Bucket(), had, bucket, had)
	}
	return nil
}

// itemMarkerTTL is how long the marker of a removed item (completed, or
// found done) stays in the items bucket: long enough for a follower that
// is behind to see the item go, and then gone, so that the bucket holds
// what is pending. Kept for good, one marker per completed item piled up
// on disk and in the NATS server's memory (its index of subjects, about
// 230 bytes each): 200 MB a day at ten items a second (found in review).
var itemMarkerTTL = kvlease.DefaultMarkerTTL // a variable for tests only

// removalTTL is the TTL of the items bucket's removal markers: itemMarkerTTL
// if its stream allows per-message TTLs. One created before they were
// used is updated to allow them (a stream can be, never back); if the
// update is refused (a user without the permission), or not answered
// within updateWait, its markers stay for good, as before (0).
func removalTTL(ctx context.Context, js jetstream.JetStream, bucket string) (time.Duration, error) {
	st, err := js.Stream(ctx, kvlease.StreamName(bucket))
	if err != nil {
		return 0, kvlease.JetStreamError("open "+bucket, err)
	}
	cfg := st.CachedInfo().Config
	if !cfg.AllowMsgTTL {
		cfg.AllowMsgTTL = true
		wait := updateWait
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)/2)
		}
		uctx, cancel := context.WithTimeout(ctx, wait)
		_, err := js.UpdateStream(uctx, cfg)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return 0, kvlease.JetStreamError("open "+bucket, ctx.Err())
			}
			return 0, nil
		}
	}
	return itemMarkerTTL, nil
}

// updateWait bounds the update of an items bucket made before its markers
// lapsed, and so Open's wait for it (at most half of what is left of its
// ctx): a NATS user that may not publish $JS.API.STREAM.UPDATE.KV_<queue>-items
// gets no answer, only a permissions violation on the connection's error
// handler, and the update took all of Open's ctx, which then failed to
// open the sink, as unavailable (or waited JetStream's 5 s without a
// deadline), every time (found by an outside client).
const updateWait = 2 * time.Second

// remove deletes item id from the items bucket (opts: a revision to
// check), leaving a marker that lapses (removalTTL).
func (q *Queue) remove(ctx context.Context, id string, opts ...jetstream.KVDeleteOpt) error {
	if q.removeTTL > 0 {
		opts = append(opts, jetstream.PurgeTTL(q.removeTTL))
	}
	return q.items.Purge(ctx, id, opts...)
}

// itemsPrefix is the subject prefix of the items bucket's keys.
func (q *Queue) itemsPrefix() string { return "$KV." + q.items.Bucket() + "." }

// maxQueueName bounds a queue's name: its buckets' streams are
// KV_<name>-items and KV_<name>-done, and JetStream refuses longer ones.
const maxQueueName = 200

// validQueueName refuses, with [kvlease.ErrInvalidName], a name its buckets
// could not be made with: only ASCII letters, digits, '-' and '_' (no dots).
func validQueueName(name string) error {
	if len(name) > maxQueueName {
		return fmt.Errorf("%w: queue name of %d bytes, at most %d", kvlease.ErrInvalidName, len(name), maxQueueName)
	}
	if err := kvlease.ValidateBucket(name); err != nil {
		return fmt.Errorf("%w: queue name %q: ASCII letters and digits, '-' and '_' only", kvlease.ErrInvalidName, name)
	}
	return nil
}

// validID refuses an item id that is no lease name, or whose claim's
// lease name would be too long: such an item could be added but never
// claimed, and every Claim that tried it failed.
func (q *Queue) validID(id string) error {
	if err := kvlease.ValidateName(id); err != nil {
		return err
	}
	if err := kvlease.ValidateName(q.claimPrefix() + id); err != nil {
		return fmt.Errorf("%w: item id %q: its claim, %q, is no lease name", kvlease.ErrInvalidName, id, q.claimPrefix()+id)
	}
	return nil
}

// errClosed is what a closed Queue answers.
func errClosed() error { return fmt.Errorf("%w: workqueue closed", kvlease.ErrClosed) }

// Close stops following the queue; Add and Claim then return
// [kvlease.ErrClosed] (a Claim waiting returns at once). Claims already
// made are kept until completed, released or lost; Result still reads.
func (q *Queue) Close() {
	q.stop()
	q.itemsF.Stop()
	q.claimsW.Stop()
	q.wg.Wait()
}

func (q *Queue) update(fn func()) {
	q.mu.Lock()
	fn()
	close(q.changed)
	q.changed = make(chan struct{})
	q.mu.Unlock()
}

func (q *Queue) followItems() {
	defer q.wg.Done()
	for {
		m, err := q.itemsF.Next()
		if err != nil {
			q.ended(err) // closed, or the connection or the bucket is gone
			return
		}
		key, removed := strings.TrimPrefix(m.Subject(), q.itemsPrefix()), kvlease.Removed(m.Headers())
		q.update(func() {
			if removed {
				delete(q.pending, key)
			} else {
				q.pending[key] = true
			}
		})
	}
}

// ended breaks the queue with err, a follow's end, unless it was closed.
func (q *Queue) ended(err error) {
	if q.closed.Err() == nil {
		q.breakOff(fmt.Errorf("workqueue %s: %w", q.name, err))
	}
}

func (q *Queue) followClaims() {
	defer q.wg.Done()
	defer func() { q.ended(cmp.Or(q.claimsW.Err(), error(kvlease.ErrUnavailable))) }()
	for ev := range q.claimsW.Events() {
		item := strings.TrimPrefix(ev.Name, q.claimPrefix())
		q.update(func() {
			// Freed: a revoked claim's holder released it before its hold
			// ended. It counted as a new claim, and a waiting Claim never
			// took the item (found by an outside client).
			if ev.Type.Ends() || ev.Type == kvlease.EventFreed {
				delete(q.claimed, item)
			} else {
				q.claimed[item] = true
			}
		})
	}
}

// Add puts an item on the queue. Errors: [kvlease.ErrInvalidName]; [kvlease.ErrHeld] if an
// item of that id is pending; [ErrDone] if it was completed (ids are not
// reused: the sink keeps each item's result); a [*GaveUpError] if it was
// given up ([WithMaxClaims]); [kvlease.ErrTooLarge] for a
// payload over the server's max_payload; [kvlease.ErrUnavailable], after
// which the item may or may not have been added: Add it again to know.
func (q *Queue) Add(ctx context.Context, id string, payload []byte) error {
	if q.closed.Err() != nil {
		return errClosed()
	}
	if err := q.validID(id); err != nil {
		return err
	}
	if done, _, _, _, err := q.Result(ctx, id); err != nil && !errors.Is(err, kvlease.ErrNotFound) {
		return err
	} else if done {
		return fmt.Errorf("%w: %q", ErrDone, id)
	}
	if q.beforeCreate != nil {
		q.beforeCreate()
	}
	rev, err := q.items.Create(ctx, id, payload)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: item %q is pending", kvlease.ErrHeld, id)
		}
		return kvlease.JetStreamError("add item", err)
	}
	// A Complete between the check and the create recorded the item done,
	// then deleted the pending one, which made room for this: added, it
	// would be found done by the next claim and dropped, its payload never
	// worked, though Add said nil (found by an outside client: 7 of 300
	// racing Adds). The sink is never undone and read through its
	// stream's leader (a direct get, from any replica, could lag the
	// Complete on R3), so a second look is exact.
	switch done, _, _, _, err := q.Result(ctx, id); {
	case errors.Is(err, ErrGaveUp): // given up between the two, as a Complete can end it
		_ = q.remove(ctx, id, jetstream.LastRevision(rev))
		return err
	case err != nil && !errors.Is(err, kvlease.ErrNotFound):
		// It said nil, and a Complete it raced dropped the item unseen
		// (found in review).
		return fmt.Errorf("%w: item %q was added, but whether a Complete raced it is not known (%w); "+
			"Add it again to know: ErrHeld says it is pending, ErrDone that it was done", kvlease.ErrUnavailable, id, err)
	case done:
		_ = q.remove(ctx, id, jetstream.LastRevision(rev))
		return fmt.Errorf("%w: %q", ErrDone, id)
	}
	return nil
}

// Claim is a worker's claim on one item.
type Claim struct {
	*kvlease.Keeper
	Item    string
	Payload []byte
	q       *Queue
	// dropped: a Complete that failed stopped renewing the claim (an
	// Orphan of the keeper, whose Close then releases nothing).
	dropped atomic.Bool
	// sent: a Complete has sent its result to the sink (it may have
	// been written, whatever that Complete returned).
	sent atomic.Bool
}

// Token returns the claim's fencing token.
func (c *Claim) Token() kvlease.Token { return c.Lease().Token() }

// Close stops renewing the claim and releases it, as [kvlease.Keeper.Close]
// does: the item is then free at once for another worker. After a
// [Claim.Complete] that failed, which stops renewing the claim, it releases
// all the same (nothing, and no error, if a newer claim holds the item);
// after Orphan it does not release.
func (c *Claim) Close(ctx context.Context) error {
	if err := c.Keeper.Close(ctx); err != nil || !c.dropped.Load() {
		return err
	}
	// A Close after a failed Complete released nothing: the item stayed
	// claimed until the claim lapsed (found by an outside client).
	if err := c.Lease().Release(ctx); err != nil && !errors.Is(err, kvlease.ErrNotHolder) {
		return err
	}
	return nil
}

// Claim blocks until worker holds a claim on a pending item, or ctx ends.
// It waits for new items and lapsed claims on the buckets' streams, without
// polling. The claim is a lease of duration d, taken with [kvlease.WithLease]'s
// options (a holder margin, a clock guard) and kept with [kvlease.WithKeeper]'s.
//
// ctx bounds the wait only, as it bounds an election's Campaign: a claim
// granted before ctx ends is returned, and once made, the claim is kept
// renewed until [Claim.Complete], Close, Orphan or its loss, whatever
// becomes of ctx (unlike [kvlease.Keep], whose ctx ending
// releases the lease). Close a claim whose work you give up: the item is
// then free at once, not when the claim's lease would have lapsed.
//
// Errors: ctx's; [kvlease.ErrInvalidOption]; the lease's and keeper's
// validation errors; [kvlease.ErrUnavailable]; [kvlease.ErrBucket] for a
// claim whose token is below the item's bar at the sink (the lease bucket
// made anew below the tokens the queue has seen; it wraps a
// [*fence.StaleTokenError]) or a sink record that does not decode; once the queue's follows of
// its buckets have ended, their error, for every Claim after
// ([kvlease.ErrConnClosed] on a connection its owner closed,
// [kvlease.ErrBucketReplaced] for a bucket made anew): open the queue
// again.
func (q *Queue) Claim(ctx context.Context, worker string, d time.Duration, opts ...kvlease.HoldOption) (*Claim, error) {
	o, err := kvlease.NewHold(opts...)
	if err != nil {
		return nil, err
	}
	if err := o.Check(d); err != nil { // not after a claim has been granted
		return nil, err
	}
	// Refused now, not by the first item's grant: on an empty queue Claim
	// waited for an item, and then for ctx, with a request no grant takes.
	if err := errors.Join(kvlease.ValidateHolder(worker), q.store.CheckDuration(d)); err != nil {
		return nil, err
	}
	for {
		if q.closed.Err() != nil {
			return nil, errClosed()
		}
		if q.broken.Err() != nil {
			return nil, context.Cause(q.broken)
		}
		q.mu.Lock()
		changed := q.changed
		q.mu.Unlock()
		// The shortest hold a revocation left on a candidate's claim: its
		// end makes no event (the server lapses a tombstone silently), so
		// Claim looks again then (found by an outside client: a worker
		// waited for good on the one item of an idle queue whose claim
		// was revoked).
		var heldBack time.Duration
		// Each free item is tried once a pass, taken from the view a few
		// at a time: a snapshot of all of them, shuffled, made every Claim
		// cost the length of the queue (found by an outside client: at
		// 10,000 items pending the snapshots took 2.7 times the CPU of the
		// claims, and 1.5 MB a Claim at 20,000).
		tried := map[string]bool{}
		for candidates := q.free(tried); len(candidates) > 0; candidates = q.free(tried) {
			for _, id := range candidates {
				tried[id] = true
				// The batch ages while its items are tried: one a follow
				// has since seen done or claimed is no candidate any more.
				q.mu.Lock()
				still := q.pending[id] && !q.claimed[id]
				q.mu.Unlock()
				if !still {
					continue
				}
				c, err := q.tryClaim(ctx, worker, id, d, o)
				if err == nil {
					return c, nil
				}
				if he := (*kvlease.HeldError)(nil); errors.As(err, &he) && he.HeldBack > 0 && (heldBack == 0 || he.HeldBack < heldBack) {
					heldBack = he.HeldBack
				}
				switch {
				case errors.Is(err, kvlease.ErrBucket):
					return nil, err // also a stale token from a lease bucket made anew (tokensBehind)
				case errors.Is(err, kvlease.ErrInvalidName):
					continue // an item no claim can name (added before Add checked): another's turn
				case !errors.Is(err, kvlease.ErrHeld) && !errors.Is(err, ErrDone) && !errors.Is(err, ErrGaveUp) &&
					!errors.Is(err, kvlease.ErrNotFound) && !errors.Is(err, fence.ErrStaleToken):
					return nil, err
				}
			}
		}
		var holdEnds <-chan time.Time // nil (never) without a hold
		if heldBack > 0 {
			holdEnds = time.After(heldBack) // collected once it fires or is dropped (Go 1.23)
		}
		select {
		case <-changed:
		case <-holdEnds:
		case <-q.closed.Done():
		case <-q.broken.Done():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// claimBatch is how many free items Claim takes from the queue's view at
// a time.
const claimBatch = 8

// free returns up to claimBatch items of the view that are pending, not
// claimed and not in tried, in a random order: the map's iteration starts
// at a random place, and the few it gives are shuffled, so that workers
// claiming at once try different items.
func (q *Queue) free(tried map[string]bool) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var ids []string
	for id, p := range q.pending {
		if p && !q.claimed[id] && !tried[id] {
			if ids = append(ids, id); len(ids) == claimBatch {
				break
			}
		}
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	return ids
}

func (q *Queue) tryClaim(ctx context.Context, worker, id string, d time.Duration, o kvlease.Hold) (*Claim, error) {
	// Read the item before claiming it: one completed (and so deleted)
	// since this queue's view was made is passed by without a claim. A
	// view can be far behind (a worker paused while others worked), and
	// each claim on a gone item was a grant and a release, a tenure in the
	// history and on the timeline of a worker that never worked the item
	// (found by an outside client: 599 of them after a 6 s pause). An
	// item's payload never changes (ids are not reused), so it is the one
	// the claim works on.
	payload, err := q.item(ctx, id)
	if err != nil {
		if errors.Is(err, kvlease.ErrNotFound) {
			q.update(func() { delete(q.pending, id) })
		}
		return nil, err
	}
	l, err := kvlease.Acquire(ctx, q.store, q.claimPrefix()+id, worker, d, o.Lease...)
	if err != nil {
		// Held: the claims stream reports that claim (and its end), so the
		// item is not marked here, where a mark could outlive the claim.
		return nil, err
	}
	// The claim is made: ctx bounds the wait only, and the rest is bounded
	// by the claim's deadline. A ctx that ended here returned its error
	// after the sink had counted the claim, and WithMaxClaims gave items
	// up that no worker had held (found by an outside client).
	ctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), l.Deadline())
	defer cancel()
	// Raise the sink's bar to this claim, so that any older claim's
	// completion is refused from now on; or, past the claims allowed, give
	// the item up under this claim's token, as a completion would end it.
	var gaveUp *doneRecord
	raise := func(keep []byte) func(doneRecord) (doneRecord, error) {
		return func(cur doneRecord) (doneRecord, error) {
			gaveUp = nil
			switch {
			case cur.GaveUp:
				return cur, cur.gaveUp(id)
			case cur.Done:
				return cur, ErrDone
			case q.maxClaims > 0 && cur.Claims >= q.maxClaims:
				r := doneRecord{Token: l.Token(), Done: true, GaveUp: true, Claims: cur.Claims, Payload: keep}
				gaveUp = &r
				if q.beforeGiveUp != nil {
					q.beforeGiveUp()
				}
				return r, nil
			}
			return doneRecord{Token: l.Token(), Claims: cur.Claims + 1}, nil
		}
	}
	err = q.sink(ctx, id, raise(payload), l.Token())
	if errors.Is(err, kvlease.ErrTooLarge) {
		err = q.sink(ctx, id, raise(nil), l.Token()) // given up without its payload, which does not fit beside the record
	}
	if err != nil && gaveUp != nil && errors.Is(err, kvlease.ErrUnavailable) && q.gaveUpBy(ctx, id, l.Token()) {
		err = nil // it landed, its reply lost: said and counted as any other
	}
	if err == nil && gaveUp != nil {
		err = gaveUp.gaveUp(id)
		q.store.Logger().Warn("work item given up", "queue", q.name, "item", id, "claims", gaveUp.Claims,
			"token", l.Token(), "payload_kept", gaveUp.Payload != nil)
		q.store.Metrics().ItemGivenUp(ctx, q.name)
	}
	if err == nil && q.afterRaise != nil {
		q.afterRaise()
	}
	if err != nil {
		behind := q.tokensBehind(ctx, l, err)
		_ = l.Release(context.WithoutCancel(ctx))
		if behind != nil {
			return nil, behind
		}
		if errors.Is(err, ErrDone) || errors.Is(err, ErrGaveUp) {
			_ = q.remove(ctx, id) // ended, but its deletion was lost (or this Claim gave it up)
		}
		return nil, err
	}
	// Still there now that the bar is raised (an item of a bucket whose
	// entries expire can have gone since the read above).
	if _, err := q.item(ctx, id); err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		if errors.Is(err, kvlease.ErrNotFound) {
			q.update(func() { delete(q.pending, id) })
		}
		return nil, err
	}
	k, err := kvlease.Keep(context.WithoutCancel(ctx), l, o.Keeper...)
	if err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Claim{Keeper: k, Item: id, Payload: payload, q: q}, nil
}

// gaveUpBy reports whether the sink has item id given up under token: a
// give-up whose write went unanswered (its outcome unknown) that landed.
// That Claim alone logs and counts it: the next Claim finds the item given
// up, removes it and says nothing, and the give-up went unlogged and
// uncounted (found in review). It reads for up to giveUpCheck, whatever
// ctx allows (the write's wait may have ended with the claim's deadline).
func (q *Queue) gaveUpBy(ctx context.Context, id string, token kvlease.Token) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpCheck)
	defer cancel()
	cur, err := kvlease.RetryUnavailable(ctx, 250*time.Millisecond, nil, func() (doneRecord, error) {
		actx, cancel := context.WithTimeout(ctx, giveUpCheck/4)
		defer cancel()
		cur, _, err := q.done.Get(actx, id)
		return cur, err
	})
	return err == nil && cur.GaveUp && cur.Token == token
}

// giveUpCheck bounds gaveUpBy's reads.
const giveUpCheck = 2 * time.Second

// tokensBehind returns an [kvlease.ErrBucket] error if err, the sink's
// refusal to raise an item's bar to claim l's token, is a bar above the
// token of a claim that still holds the item: not a newer claim, but a
// lease bucket whose tokens are below those the sink has seen (made anew
// below its history). Each Claim then granted and released the item's
// claim, and woke on its own events to do it again, until the bucket's
// tokens reached the bar: a thousand tenures, and seconds, for a bar a
// thousand grants up, which filled the lease history (found by an outside
// client). Nil otherwise.
func (q *Queue) tokensBehind(ctx context.Context, l *kvlease.Lease, err error) error {
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Highest <= l.Token() || l.Check() != nil {
		return nil
	}
	if rec, gerr := q.store.Get(ctx, l.Name()); gerr != nil || rec.Token != l.Token() {
		return nil // ended: a newer claim may have raised the bar
	}
	return fmt.Errorf("%w: queue %q: claim %q has token %d, below the %d its sink has seen: was the lease bucket %q made anew? "+
		"Make it with a first token above the sink's (kvlease.WithFirstToken, serve --first-token): %w",
		kvlease.ErrBucket, q.name, l.Name(), l.Token(), stale.Highest, q.store.Bucket(), err)
}

// item reads the pending item id's payload through the items stream's
// leader: a direct get, from any replica, could miss an item just added on
// R3, and the item was then dropped from pending for good (found in
// review).
//
// Errors: [kvlease.ErrNotFound] if id is not pending; [kvlease.ErrUnavailable].
func (q *Queue) item(ctx context.Context, id string) ([]byte, error) {
	m, err := kvlease.LeaderLast(ctx, q.js, kvlease.StreamName(q.items.Bucket()), q.itemsPrefix()+id)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && kvlease.Removed(m.Header):
		return nil, fmt.Errorf("%w: item %q", kvlease.ErrNotFound, id)
	case err != nil:
		return nil, kvlease.JetStreamError("read item", err)
	}
	return m.Data, nil
}

// sink applies fn to the item's sink record with a compare-and-set, if the
// record's token is at most token (else *fence.StaleTokenError).
func (q *Queue) sink(ctx context.Context, id string, fn func(doneRecord) (doneRecord, error), token kvlease.Token) error {
	return q.done.Update(ctx, id, func(cur doneRecord) (doneRecord, error) {
		if cur.Token > token {
			return cur, &fence.StaleTokenError{Resource: id, Token: token, Highest: cur.Token}
		}
		return fn(cur)
	})
}

// Complete records the item's result at the sink, if the claim's holder
// deadline has not passed when it checks and no newer claim has raised the
// sink's bar when the compare-and-set lands, then deletes the item and
// releases the claim. A worker paused between the two can complete after
// its deadline, as long as no newer claim has raised the bar.
//
// Complete may be called again after an error: once the sink has this
// claim's result, the check and the write are done, and a second call goes
// on with the rest (an outside client's retries after [kvlease.ErrUnavailable]
// were told [ErrDone], or that the lease was released, for a result they
// had recorded). A Complete whose write at the sink fails (but for
// [kvlease.ErrTooLarge]) stops renewing the claim (its Context ends), so
// that a claim not completed again lapses: call Complete again before the
// claim's deadline, or Close to free the item at once.
//
// Errors: [*kvlease.LeaseExpiredError] (nothing written; the claim will lapse and
// the item be redone); [*fence.StaleTokenError] (a newer claim has raised
// the bar); [ErrDone] (another claim, or this one with another result,
// completed it); a [*GaveUpError] (a Claim gave the item up after this
// claim ended: [WithMaxClaims]); [kvlease.ErrTooLarge] (the result does not fit in one
// NATS message: nothing sent, the claim kept); [kvlease.ErrUnavailable]
// (the outcome unknown: call Complete again).
func (c *Claim) Complete(ctx context.Context, result []byte) error {
	token := c.Token()
	recorded := func(cur doneRecord) bool { return cur.Done && cur.Token == token && bytes.Equal(cur.Result, result) }
	if err := c.Lease().Check(); err != nil {
		if !c.sent.Load() {
			// Nothing of this claim's can be at the sink: refused now,
			// with nothing sent. It read the sink first, and with the
			// server gone said ErrUnavailable, "call Complete again", for
			// a claim that could never complete (found by an outside
			// client).
			return err
		}
		// Past the deadline, or released by an earlier Complete that then
		// failed: done if that one wrote the result.
		cur, _, gerr := c.q.done.Get(ctx, c.Item)
		switch {
		case gerr != nil:
			return gerr // whether an earlier Complete wrote it is unknown
		case recorded(cur):
		case cur.GaveUp:
			return cur.gaveUp(c.Item) // not done: said ErrDone, "another claim completed it"
		case cur.Done:
			return ErrDone // it will not be redone
		default:
			return err
		}
	} else if err := c.send(ctx, func(cur doneRecord) (doneRecord, error) {
		// The bar check of q.sink is this token check's, but that an item
		// given up says so (a revoked claim was told a newer claim had
		// raised the bar, as if the item would be redone).
		switch {
		case recorded(cur):
			return cur, errRecorded
		case cur.GaveUp:
			return cur, cur.gaveUp(c.Item)
		case cur.Done:
			return cur, ErrDone
		case cur.Token != token:
			return cur, &fence.StaleTokenError{Resource: c.Item, Token: token, Highest: cur.Token}
		}
		return doneRecord{Token: token, Done: true, Worker: c.Lease().Holder(), Result: result, Claims: cur.Claims}, nil
	}); err != nil && !errors.Is(err, errRecorded) {
		if errors.Is(err, kvlease.ErrTooLarge) {
			// Refused before it was sent: the claim is as it was, renewed,
			// for a smaller result or a Close that releases it (orphaned,
			// Close released nothing and the item stayed claimed for the
			// claim's TTL: found by an outside client).
			return err
		}
		c.dropped.Store(true)
		c.Orphan() // renewed no more: a Complete retried before the deadline still writes
		return err
	}
	if err := c.q.remove(ctx, c.Item); err != nil {
		return kvlease.JetStreamError("delete item", err)
	}
	if err := c.Keeper.Close(ctx); err != nil {
		return err
	}
	// After an earlier Complete orphaned the claim, the keeper's Close
	// releases nothing: the claim stayed held, unrenewed, for its TTL
	// (found in review). A release already made is not made again.
	return c.Lease().Release(ctx)
}

// send applies fn, which checks the claim's token itself, to the claim's
// item at the sink, once it has marked the claim as having sent a result.
func (c *Claim) send(ctx context.Context, fn func(doneRecord) (doneRecord, error)) error {
	c.sent.Store(true)
	return c.q.done.Update(ctx, c.Item, fn)
}

// errRecorded: the sink has the claim's result already (an earlier
// Complete wrote it).
var errRecorded = errors.New("workqueue: result recorded")

// Result returns an item's sink record: whether it is done, by which
// worker, with which token, and its result. A pending item is not done.
//
// Errors: a [*GaveUpError] for an item given up ([WithMaxClaims]): not
// done, nor pending; [kvlease.ErrInvalidName]; [kvlease.ErrNotFound] for an id that
// is neither pending nor done (never added: it read as pending; found by
// an outside client); [kvlease.ErrUnavailable].
func (q *Queue) Result(ctx context.Context, id string) (done bool, worker string, token kvlease.Token, result []byte, err error) {
	if err := kvlease.ValidateName(id); err != nil {
		return false, "", 0, nil, err
	}
	r, rev, err := q.done.Get(ctx, id)
	if err != nil {
		return false, "", 0, nil, err
	}
	if rev == 0 {
		switch _, err := q.item(ctx, id); {
		case errors.Is(err, kvlease.ErrNotFound):
			return false, "", 0, nil, fmt.Errorf("%w: no item %q on the queue, pending or done", kvlease.ErrNotFound, id)
		case err != nil:
			return false, "", 0, nil, err
		}
	}
	if err := r.gaveUp(id); err != nil {
		return false, "", r.Token, nil, err
	}
	return r.Done, r.Worker, r.Token, r.Result, nil
}
