package kvlease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease/atomicbatch"
)

// Group commit. With sync before ack, an R1 stream syncs once per message,
// so concurrent single publishes stop scaling at the disk; a JetStream
// atomic batch is staged and then committed with one sync (a fixed ~4
// fsyncs whatever its size) and, on R3, one raft proposal. The writer
// below turns concurrent writes into such batches:
//
//   - A request that finds a write slot free goes out at once, alone, as
//     the single publish it always was: a lone request is never delayed.
//   - While every slot is busy, requests queue; the write that frees a
//     slot takes what has queued (up to MaxMessages, never two writes to
//     one key, never a key with a write in flight) as its next write: an
//     atomic batch if at least MinMessages (the break-even), else single
//     publishes sent together, whose answers the slot does not wait for:
//     each frees its key when it is answered, and the slot goes on to what
//     has queued (below the break-even the writer keeps the server as busy
//     as callers without batching would).
//   - Where batches do not form (the writes taken from the queue stayed
//     below the break-even passThroughAfter times in a row: a few
//     concurrent callers), queueing only costs: each queued request
//     waited for the write ahead of it, and the server sat idle for a
//     round trip. The writer then passes requests through, as single
//     publishes at once, like a store without batching, until
//     MinMessages − 1 of them are in flight together (then there are
//     callers enough for a batch, and it queues again).
//   - A queued request whose context has ended is never sent: a renewal
//     capped at its holder's deadline must not reach the server after it;
//     nor is a renewal that has queued into Renew's guard before the
//     revision's expiry, whatever its context.
//   - A request too large for the server (its max_payload) is refused
//     before it queues: in a batch it would sink the others.
//   - One failed expectation rejects a whole batch (err 10071 or 10164,
//     naming no message). The writer first screens out what the store
//     already knows to be stale (revCache.stale), and on a rejected batch
//     bisects it, down to single publishes, so that every request gets its
//     own true answer and none fails because of another.
//   - Revisions come from the commit's ack: message i of n has revision
//     seq − n + i (the server commits a batch contiguously: on R1 under
//     the stream's isolation lock, on R3 as one multi-entry proposal).
//   - A request is answered only after its batch's ack, which the server
//     sends after the sync: durability is that of a single publish. A
//     batch whose ack cannot come (the connection was lost) or that no
//     caller waits for any more frees its slot at once (ackWait), its
//     outcome unknown.

// writeReq is one write waiting for its answer.
type writeReq struct {
	ctx    context.Context
	name   string
	op     string
	msg    *nats.Msg // subject, data and headers, without expectation, TTL or batch headers
	expect uint64    // the subject's last revision this write expects (0: none)
	ttl    time.Duration
	done   chan writeResult // buffered (1): the writer never blocks on it
	seq    uint64           // when it queued (writer.arrivals), if it did
	wrote  uint64           // the revision it was written at, once answered so (see screenLocked)
	// answered is when its answer came (monoSince), set where it comes
	// (publishOne, answer): its caller may wake to it late (StorageFull).
	answered int64
	// tooLate, if set (renewals), says why the write must no longer be
	// sent (Store.Renew's guard): checked again as it goes out, as its
	// context is, however long it queued.
	tooLate func() error
}

// unsendable is why r must not be sent now, if it must not: its context
// has ended, or (a renewal) it would reach the server too close to the
// expiry of the revision it renews.
func (r *writeReq) unsendable() error {
	if err := r.ctx.Err(); err != nil {
		return translate(r.op, err)
	}
	if r.tooLate != nil {
		return r.tooLate()
	}
	return nil
}

type writeResult struct {
	rev uint64
	err error
}

func (r *writeReq) answer(rev uint64, err error) {
	if err == nil {
		r.wrote = rev
	}
	r.answered = monoSince()
	r.done <- writeResult{rev, err}
}

// writer is a Store's group commit. Its goroutines live only while writes
// are queued or in flight, and each write is bounded by the batch timeout
// or its requests' contexts, so they need no stopping: wg lets tests wait
// for them.
type writer struct {
	s      *Store
	limits BatchLimits

	mu       sync.Mutex
	queue    []*writeReq
	inflight int            // writes in flight (≤ limits.MaxInFlight)
	keys     map[string]int // names with a write in flight
	off      bool           // the stream refused atomic publish: single publishes only
	arrivals uint64         // requests queued so far
	// passThrough: batches have not been forming (lowTakes writes in a
	// row were taken from the queue below the break-even), so a request
	// that finds every slot busy goes out at once as a single publish
	// instead of queueing, while fewer than MinMessages − 1 (passing)
	// are in flight so.
	passThrough bool
	lowTakes    int
	passing     int
	// lingering are the slots waiting in next for more requests to queue.
	lingering []lingerer
	// gap ends a linger early: once requests have begun to queue, a slot
	// lingers on only while the next comes within gap (lingerGap).
	gap time.Duration
	wg  sync.WaitGroup

	// onSend, if set (tests), is called as each write goes out, with
	// whether it is a batch and the names it carries, before it is sent.
	onSend func(batch bool, names []string)
	// onQueue, if set (tests), is called after a request has queued, with
	// the queue's length then.
	onQueue func(queued int)
	// onLinger, if set (tests), is called as a slot begins to linger, with
	// the queue's length and the length it waits for.
	onLinger func(queued, want int)
	// onWritten, if set (tests), is called by a slot after a write it
	// took from the queue has been answered, before it looks for the next.
	onWritten func()
}

func newWriter(s *Store, l BatchLimits) *writer {
	return &writer{s: s, limits: l, keys: make(map[string]int), gap: lingerGap}
}

// submit writes req, alone at once if a slot is free, else with the next
// write, and returns its revision.
func (w *writer) submit(req *writeReq) (uint64, error) {
	w.mu.Lock()
	if w.inflight < w.limits.MaxInFlight && w.keys[req.name] == 0 {
		rev, sent, err := w.publishNowLocked(req, &w.inflight)
		if !sent {
			return rev, err
		}
		if err == nil {
			req.wrote = rev
		}
		if more, mark := w.release([]*writeReq{req}); more {
			// Others queued meanwhile: the slot passes to them, on a
			// goroutine of their own so that this answer is not delayed.
			w.wg.Go(func() { w.run(1, mark) })
		}
		return rev, err
	}
	if w.passThrough && len(w.queue) == 0 && w.keys[req.name] == 0 {
		if w.passing < w.limits.MinMessages-1 {
			return w.passOne(req) // unlocks
		}
		// Callers enough for a batch: queue again.
		w.passThrough, w.lowTakes = false, 0
	}
	w.arrivals++
	req.seq = w.arrivals
	w.queue = append(w.queue, req)
	queued := len(w.queue)
	w.wakeLingerersLocked()
	w.mu.Unlock()
	if w.onQueue != nil {
		w.onQueue(queued)
	}
	select {
	case r := <-req.done:
		return r.rev, r.err
	case <-req.ctx.Done():
		select {
		case r := <-req.done: // answered as the context ended: the answer is true
			return r.rev, r.err
		default:
		}
		// Still queued, it will be dropped unsent; if its write has gone
		// out, it may or may not take effect.
		return 0, translate(req.op, req.ctx.Err())
	}
}

// passOne sends req at once as a single publish, beside the writes in
// flight, holding no slot (see passThrough). Called with w.mu held; it
// unlocks it.
func (w *writer) passOne(req *writeReq) (uint64, error) {
	rev, sent, err := w.publishNowLocked(req, &w.passing)
	if sent {
		if err == nil {
			req.wrote = rev
		}
		w.mu.Lock()
		w.passing--
		w.mu.Unlock()
		w.released(req)
	}
	return rev, err
}

// publishNowLocked sends req at once as a single publish, counted in *n
// (w.inflight for a slot, w.passing without one) and its key marked in
// flight, unless the cache shows it stale (errMismatch, sent false).
// Called with w.mu held; it unlocks it. If sent, the caller frees the key
// and *n.
func (w *writer) publishNowLocked(req *writeReq, n *int) (rev uint64, sent bool, err error) {
	if w.s.cache.stale(req.name, req.expect, time.Now()) {
		w.mu.Unlock()
		return 0, false, errMismatch
	}
	*n++
	w.keys[req.name]++
	w.mu.Unlock()
	w.sent(false, req.name)
	rev, err = w.s.publishOne(req)
	return rev, true, err
}

// tookLocked notes how many requests a slot took from the queue for its
// next write: batches form where that reaches the break-even; where it
// stays below passThroughAfter times in a row, requests pass through.
func (w *writer) tookLocked(n int) {
	if n >= w.limits.MinMessages {
		w.passThrough, w.lowTakes = false, 0
		return
	}
	if w.lowTakes++; w.lowTakes >= passThroughAfter {
		w.passThrough = true
	}
}

// passThroughAfter is how many writes in a row taken from the queue below
// the break-even turn queueing off (passThrough).
const passThroughAfter = 8

// run holds a write slot: it writes what has queued, then what queued
// meanwhile, until nothing is queued. answered is how many requests the
// slot's previous write answered, and mark the arrivals count before it
// answered them (see next).
func (w *writer) run(answered int, mark uint64) {
	for {
		reqs := w.next(answered, mark)
		if len(reqs) == 0 {
			return
		}
		a := &answers{w: w}
		if w.singlesPay(len(reqs)) {
			// Below the break-even: single publishes, on their own. The
			// slot does not wait for their answers (each frees its key as
			// it is answered): a group of singles that held the slot until
			// its last answer left the server idle between groups.
			a.onTheirOwn(reqs)
			if !w.keepSlot() {
				return
			}
			answered, mark = 0, 0
			continue
		}
		a.write(reqs)
		if w.onWritten != nil {
			w.onWritten()
		}
		if more, _ := w.release(reqs); !more {
			return
		}
		answered, mark = len(reqs), a.mark
	}
}

// release ends the write of done: its keys are free again. If requests
// are queued, the caller keeps the slot for them (more); it also keeps it,
// to linger in next, when done was batch-sized and nothing has queued yet:
// its callers' next requests, still on their way, must queue for one
// batch instead of the first going out alone and the rest after it (a
// cohort split, as in next). Else the slot is freed. mark is the arrivals
// count now.
func (w *writer) release(done []*writeReq) (more bool, mark uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range done {
		if w.keys[r.name]--; w.keys[r.name] <= 0 {
			delete(w.keys, r.name)
		}
	}
	w.screenLocked(done)
	if len(w.queue) == 0 && !w.lingersFor(len(done)) {
		w.inflight--
		return false, w.arrivals
	}
	return true, w.arrivals
}

// keepSlot keeps the slot if requests are queued, else frees it.
func (w *writer) keepSlot() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.queue) == 0 {
		w.inflight--
		return false
	}
	return true
}

// singlesPay says whether n requests go as single publishes: fewer than
// the break-even, or the stream refuses atomic batches.
func (w *writer) singlesPay(n int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.off || n < w.limits.MinMessages
}

// released frees the key of r, a single publish on its own that has been
// answered, and takes a free slot for what queued behind that key.
func (w *writer) released(r *writeReq) {
	w.mu.Lock()
	if w.keys[r.name]--; w.keys[r.name] <= 0 {
		delete(w.keys, r.name)
	}
	w.screenLocked([]*writeReq{r})
	start := len(w.queue) > 0 && w.inflight < w.limits.MaxInFlight
	if start {
		w.inflight++
	}
	w.mu.Unlock()
	if start {
		w.wg.Go(func() { w.run(0, 0) })
	}
}

// screenLocked answers errMismatch to the queued requests that the writes
// of done, just answered, made stale: their key now has a revision past
// the one they expect. The cache learns of a write only when its caller
// has its answer, after the key is free, so takeLocked would send them,
// and one in a batch has the whole batch refused (and bisected).
func (w *writer) screenLocked(done []*writeReq) {
	if len(w.queue) == 0 {
		return
	}
	var written map[string]uint64
	for _, r := range done {
		if r.wrote != 0 {
			if written == nil {
				written = make(map[string]uint64, len(done))
			}
			written[r.name] = r.wrote
		}
	}
	if written == nil {
		return
	}
	rest := w.queue[:0]
	for _, q := range w.queue {
		if rev, ok := written[q.name]; ok && q.expect < rev {
			q.answer(0, errMismatch)
			continue
		}
		rest = append(rest, q)
	}
	clear(w.queue[len(rest):])
	w.queue = rest
}

// lingersFor says whether a slot waits for want requests to queue: only
// when they would make a batch.
func (w *writer) lingersFor(want int) bool {
	return w.limits.Linger > 0 && !w.off && want >= w.limits.MinMessages
}

// answers answers the requests of one write, and marks the arrivals count
// as its first answer goes out: requests that queued after it may be its
// callers' next ones.
type answers struct {
	w    *writer
	once sync.Once
	mark uint64
}

func (a *answers) answer(r *writeReq, rev uint64, err error) {
	a.once.Do(func() {
		a.w.mu.Lock()
		a.mark = a.w.arrivals
		a.w.mu.Unlock()
	})
	r.answer(rev, err)
}

// next takes the slot's next write from the queue; if it takes nothing,
// the slot is freed.
//
// It first lingers (at most limits.Linger, and no longer than w.gap after
// the last request queued) when waiting can turn what is
// queued into a batch, or into a larger one: the callers the slot's
// previous write answered typically send their next requests at once (a
// closed loop: write, wait, write again), and without waiting for them
// concurrent callers split into cohorts that alternate between writes and
// never merge, each cohort paying the batch's fixed cost. It waits for the
// requests that queued before its answers went out (mark) plus one per
// answer, only when that reaches the break-even: after a write of one or
// a few, or with linger off, the slot is freed as soon as nothing is
// queued, and a request that finds a slot free is never delayed.
func (w *writer) next(answered int, mark uint64) []*writeReq {
	w.mu.Lock()
	defer w.mu.Unlock()
	before := 0
	for _, r := range w.queue {
		if r.seq <= mark {
			before++
		}
	}
	if want := min(before+answered, w.limits.MaxMessages); len(w.queue) < want && w.lingersFor(want) {
		l := lingerer{want: want, grown: make(chan struct{}), arrived: make(chan struct{}, 1)}
		w.lingering = append(w.lingering, l)
		queued := len(w.queue)
		w.mu.Unlock()
		if w.onLinger != nil {
			w.onLinger(queued, want)
		}
		deadline := time.Now().Add(w.limits.Linger)
		wait := w.limits.Linger
		if queued > before {
			// Some came back before the slot began to linger: the
			// arrivals have begun, and their wake-up came before there
			// was anyone to wake.
			wait = min(w.gap, wait)
		}
		t := time.NewTimer(wait)
	wait:
		for {
			select {
			case <-l.grown:
				break wait
			case <-t.C:
				break wait
			case <-l.arrived:
				// They have begun to come back: wait on only while
				// they keep coming.
				t.Reset(min(w.gap, time.Until(deadline)))
			}
		}
		t.Stop()
		w.mu.Lock()
		w.lingering = slices.DeleteFunc(w.lingering, func(o lingerer) bool { return o.grown == l.grown })
	}
	next := w.takeLocked()
	if len(next) == 0 {
		w.inflight--
	} else {
		w.tookLocked(len(next))
	}
	return next
}

// lingerGap is how long a lingering slot waits for the next of its
// callers' requests once they have begun to come back. Through the
// service, 64 callers' next requests arrived within 2 to 9 ms of the
// answers, mostly less than 1 ms apart (BenchmarkGrantRelease, two shared
// cores); a longer
// pause means the rest are not coming soon (an open loop, or callers that
// stopped), and waiting on would only delay those queued.
const lingerGap = time.Millisecond

// lingerer is a slot waiting in next for the queue to hold want requests.
type lingerer struct {
	want    int
	grown   chan struct{} // closed when the queue holds want
	arrived chan struct{} // buffered (1): a request has queued
}

// wakeLingerersLocked wakes the lingering slots whose wait is over.
func (w *writer) wakeLingerersLocked() {
	w.lingering = slices.DeleteFunc(w.lingering, func(l lingerer) bool {
		if len(w.queue) < l.want {
			select {
			case l.arrived <- struct{}{}:
			default:
			}
			return false
		}
		close(l.grown)
		return true
	})
}

// takeLocked takes the next write from the queue, in order: requests
// that must no longer be sent (writeReq.unsendable) are answered unsent,
// those the cache shows stale are answered errMismatch, and a request for
// a name already in this write or in another write in flight stays queued
// for a later one.
func (w *writer) takeLocked() []*writeReq {
	var take []*writeReq
	now := time.Now()
	rest := w.queue[:0]
	for _, r := range w.queue {
		if len(take) >= w.limits.MaxMessages || w.keys[r.name] > 0 {
			rest = append(rest, r)
			continue
		}
		switch err := r.unsendable(); {
		case err != nil:
			r.answer(0, err)
		case w.s.cache.stale(r.name, r.expect, now):
			r.answer(0, errMismatch)
		default:
			w.keys[r.name]++
			take = append(take, r)
		}
	}
	clear(w.queue[len(rest):])
	w.queue = rest
	return take
}

// write sends reqs (distinct names) and answers each: as one atomic batch
// if there are enough of them, else as single publishes sent together.
// Requests whose context has ended by now are answered without being sent.
func (a *answers) write(reqs []*writeReq) {
	w := a.w
	live := make([]*writeReq, 0, len(reqs))
	for _, r := range reqs {
		if err := r.unsendable(); err != nil {
			a.answer(r, 0, err)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	if !w.s.nc.IsConnected() {
		// See publishOne: nothing is buffered for a later reconnect.
		for _, r := range live {
			a.answer(r, 0, NotConnected(w.s.nc, r.op))
		}
		return
	}
	w.mu.Lock()
	off := w.off
	w.mu.Unlock()
	if off || len(live) < w.limits.MinMessages {
		a.singles(live)
		return
	}
	// Once more, as close to sending as can be: a request whose context
	// ended meanwhile (a renewal past its holder's deadline) stays unsent.
	live = slices.DeleteFunc(live, func(r *writeReq) bool {
		if err := r.unsendable(); err != nil {
			a.answer(r, 0, err)
			return true
		}
		return false
	})
	if len(live) < w.limits.MinMessages {
		a.singles(live)
		return
	}
	w.sent(true, names(live)...)
	ctx, done := w.ackWait(live)
	revs, err := w.s.publishBatch(ctx, live)
	done()
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		for i, r := range live {
			a.answer(r, revs[i], nil)
		}
	case !errors.As(err, &apiErr):
		// No answer: the batch may or may not have been committed.
		for _, r := range live {
			a.answer(r, 0, translate(r.op, err))
		}
	case apiErr.ErrorCode == atomicbatch.ErrCodeDisabled:
		w.mu.Lock()
		w.off = true
		w.mu.Unlock()
		w.s.log.Warn("lease bucket refuses atomic batches; writing single publishes", "bucket", w.s.o.bucket, "err", err)
		a.singles(live)
	case (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant ||
		apiErr.ErrorCode == atomicbatch.ErrCodeDuplicate) && len(live) >= 2*w.limits.MinMessages:
		// Some expectation failed, or a retried grant's message ID was
		// stored before, and the server does not say whose: nothing was
		// written. Each half is a batch of its own; a single publish of the
		// duplicate gets its own answer (the revision stored before).
		h := len(live) / 2
		a.write(live[:h])
		a.write(live[h:])
	default:
		// A refusal of the batch (a failed expectation in a small one, or
		// a limit): nothing was written; each request gets its own answer.
		a.singles(live)
	}
}

// singles sends each request as its own publish, all at once, and waits
// for their answers.
func (a *answers) singles(reqs []*writeReq) {
	w := a.w
	var wg sync.WaitGroup
	for _, r := range reqs {
		if err := r.unsendable(); err != nil {
			a.answer(r, 0, err)
			continue
		}
		w.sent(false, r.name)
		wg.Go(func() {
			rev, err := w.s.publishOne(r)
			a.answer(r, rev, err)
		})
	}
	wg.Wait()
}

// onTheirOwn sends each request as its own publish, all at once, and
// returns without waiting: each is answered, and its key freed, when its
// ack comes. A request whose context has ended is answered unsent.
func (a *answers) onTheirOwn(reqs []*writeReq) {
	w := a.w
	for _, r := range reqs {
		if err := r.unsendable(); err != nil {
			a.answer(r, 0, err)
			w.released(r)
			continue
		}
		w.wg.Go(func() {
			w.sent(false, r.name)
			rev, err := w.s.publishOne(r)
			a.answer(r, rev, err)
			w.released(r)
		})
	}
}

// sent records a write as it goes out: one publish (batch false, one
// name) or an atomic batch.
func (w *writer) sent(batch bool, names ...string) {
	w.s.metrics.StoreWrite(context.Background(), batch, len(names))
	if w.onSend != nil {
		w.onSend(batch, names)
	}
}

func names(reqs []*writeReq) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.name
	}
	return out
}

// publishOne writes one message, expecting r.expect to be the subject's
// last revision (0: no message), with a TTL if r.ttl > 0.
func (s *Store) publishOne(r *writeReq) (uint64, error) {
	if !s.nc.IsConnected() {
		// While reconnecting, nats.go buffers what is published and sends it
		// on reconnect, which may be after the holder's deadline: a renewal
		// flushed then would extend a lease its holder has given up. Send
		// nothing that cannot go now.
		return 0, NotConnected(s.nc, r.op)
	}
	opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(r.expect)}
	if r.ttl > 0 {
		opts = append(opts, jetstream.WithMsgTTL(r.ttl))
	}
	ack, err := s.js.PublishMsg(r.ctx, r.msg, opts...)
	r.answered = monoSince()
	switch {
	case err != nil:
		return 0, translate(r.op, err)
	case ack.Duplicate:
		return ack.Sequence, errDuplicate
	}
	return ack.Sequence, nil
}

// ackWait is how long a batch of reqs may wait for its ack, which holds
// a write slot (on R1 the only one) and its keys: until the batch timeout,
// until the connection is lost (an ack the server sent meanwhile is lost
// with it: core NATS does not resend), or until every request's context
// has ended (nobody waits for the answer). Once it ends, the batch's
// outcome is unknown: its requests are answered ErrUnavailable and the
// slot goes to the next write. done releases it.
func (w *writer) ackWait(reqs []*writeReq) (ctx context.Context, done func()) {
	base, cancel := context.WithCancelCause(context.Background())
	ctx, cancelT := context.WithTimeoutCause(base, w.limits.Timeout,
		fmt.Errorf("no acknowledgement of the batch within %v; it may or may not have been stored", w.limits.Timeout))
	var left atomic.Int64
	left.Store(int64(len(reqs)))
	stops := make([]func() bool, len(reqs))
	for i, r := range reqs {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if left.Add(-1) == 0 {
				cancel(errCallersGone)
			}
		})
	}
	// Registered before the connection's state is read, so that a loss
	// between the two is seen.
	status := w.s.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	if !w.s.nc.IsConnected() {
		cancel(errAckLost)
	}
	w.wg.Go(func() {
		select {
		case _, ok := <-status:
			if ok {
				cancel(errAckLost)
			}
		case <-ctx.Done():
		}
	})
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		w.s.nc.RemoveStatusListener(status)
		cancelT()
		cancel(nil)
	}
}

var (
	errAckLost     = errors.New("connection to NATS lost before the batch's acknowledgement came; it may or may not have been stored")
	errCallersGone = errors.New("every request of the batch gave up before its acknowledgement came; it may or may not have been stored")
)

// publishBatch writes reqs (distinct subjects) as one atomic batch, each
// with its expectation and TTL, and returns their revisions, in order,
// waiting for the ack while ctx lasts. An error that is a
// *jetstream.APIError means the server refused the batch and nothing of
// it was written; any other error means no answer (it may have been).
func (s *Store) publishBatch(ctx context.Context, reqs []*writeReq) ([]uint64, error) {
	// One allocation per batch for the messages and one for the header
	// values, not one per message and per header: at 100k live leases
	// serve's GC was about a quarter of its CPU.
	msgs, ms := make([]*nats.Msg, len(reqs)), make([]nats.Msg, len(reqs))
	vals := make([]string, 2*len(reqs))
	for i, r := range reqs {
		// The request's own header stays as it was: a rejected batch is
		// sent again as single publishes, without batch headers.
		h := make(nats.Header, len(r.msg.Header)+2+atomicbatch.Headers)
		maps.Copy(h, r.msg.Header) // values shared, never changed: a header is set by replacing its slice
		v := vals[2*i : 2*i+2 : 2*i+2]
		v[0] = strconv.FormatUint(r.expect, 10)
		h[jetstream.ExpectedLastSubjSeqHeader] = v[0:1:1]
		if r.ttl > 0 {
			v[1] = r.ttl.String()
			h[jetstream.MsgTTLHeader] = v[1:2:2]
		}
		ms[i] = nats.Msg{Subject: r.msg.Subject, Data: r.msg.Data, Header: h}
		msgs[i] = &ms[i]
	}
	revs, err := atomicbatch.Publish(ctx, s.nc, msgs)
	if err != nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return revs, err
}
