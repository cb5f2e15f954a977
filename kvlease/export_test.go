package kvlease

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SetSendHook makes st call f as each write goes out: whether it is an
// atomic batch, and the names it carries. Call it before st writes.
func SetSendHook(st *Store, f func(batch bool, names []string)) {
	if st.w != nil {
		st.w.onSend = f
	}
}

// SetWroteHook makes st call f once a write's answer (accepted, or refused
// for the storage limit) has reached its writer, before the writer notes
// it for StorageFull: as a writer woken late would. Call it before st
// writes.
func SetWroteHook(st *Store, f func(err error)) { st.wroteHook = f }

// SetQueueHook makes st call f after a request queues, with the queue's
// length then. Call it before st writes.
func SetQueueHook(st *Store, f func(queued int)) {
	if st.w != nil {
		st.w.onQueue = f
	}
}

// SetLingerHook makes st call f as a write slot begins to linger, with the
// queue's length and the length it waits for. Call it before st writes.
func SetLingerHook(st *Store, f func(queued, want int)) {
	if st.w != nil {
		st.w.onLinger = f
	}
}

// SetWrittenHook makes st call f each time a write slot has had a write
// it took from the queue answered, before it takes the next. Call it
// before st writes.
func SetWrittenHook(st *Store, f func()) {
	if st.w != nil {
		st.w.onWritten = f
	}
}

// QueueLen returns how many requests wait in st's group commit.
func QueueLen(st *Store) int {
	if st.w == nil {
		return 0
	}
	st.w.mu.Lock()
	defer st.w.mu.Unlock()
	return len(st.w.queue)
}

// WaitWrites waits for st's write goroutines to end.
func WaitWrites(st *Store) {
	if st.w != nil {
		st.w.wg.Wait()
	}
}

// CreateRaw creates the keys names (each expected to have no message) with
// a TTL, bypassing the group commit: as one atomic batch, or as single
// publishes sent together. It is for the break-even benchmark.
func CreateRaw(ctx context.Context, st *Store, names []string, data []byte, ttl time.Duration, batch bool) error {
	reqs := make([]*writeReq, len(names))
	for i, n := range names {
		reqs[i] = &writeReq{ctx: ctx, name: n, op: "grant", expect: 0, ttl: ttl, done: make(chan writeResult, 1),
			msg: &nats.Msg{Subject: st.prefix + n, Header: nats.Header{hdrOp: []string{"grant"}}, Data: data}}
	}
	if batch {
		bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := st.publishBatch(bctx, reqs)
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		wg.Go(func() { _, errs[i] = st.publishOne(r) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("single create: %w", err)
		}
	}
	return nil
}

// SetLingerGap sets how long st's lingering slots wait for the next
// request once requests have begun to queue (lingerGap by default). Call
// it before st writes.
func SetLingerGap(st *Store, d time.Duration) {
	if st.w != nil {
		st.w.gap = d
	}
}

// PassThroughAfter is passThroughAfter, for tests.
const PassThroughAfter = passThroughAfter

// SetNow replaces l's clock, before l is kept (tests).
func SetNow(l *Lease, f func() time.Time) { l.now = f }

// RevokeOnceAfter is one attempt of Revoke after an earlier attempt,
// revoking rec, went unanswered (tests).
func RevokeOnceAfter(ctx context.Context, s *Store, rec Record, reason string, opts ...RevokeOption) (Record, error) {
	return s.revokeOnce(ctx, rec.Name, reason, NewRevocation(opts...), &rec)
}

// BucketConfig is the KV configuration of the lease bucket Open creates
// without a first token.
func BucketConfig(bucket string) jetstream.KeyValueConfig {
	o := defaultOptions()
	o.bucket = bucket
	return bucketConfig(o)
}

// SetNoPeersPatience sets how long Open takes a placement refused for too
// few servers for a cluster still forming, until the returned function
// restores it.
func SetNoPeersPatience(d time.Duration) (restore func()) {
	was := noPeersPatience
	noPeersPatience = d
	return func() { noPeersPatience = was }
}
