package grantor

import (
	"sync"

	"github.com/leased/leased/kvlease"
)

// feedBuffer bounds the events a feed holds for its follower.
const feedBuffer = 8192

// feed passes the events of the service's watch of the bucket (the one
// the holder index follows) on to one follower, the observer, so that an
// observing node runs one watch of the whole bucket, not two: a second
// watch cost about 6% of the CPU of a renewal (BenchmarkServiceRenew), and
// held a second copy of every live lease.
//
// The holder index must never wait for the observer, so a follower that
// falls feedBuffer events behind is cut off (its lost channel closes) and
// catches up on a watch of its own, as it began (observer.changes).
type feed struct {
	mu     sync.Mutex
	last   uint64 // the revision of the last event passed through
	sub    *feedSub
	closed bool // the service's watch has ended
	size   int  // the follower's buffer: feedBuffer, less in tests
}

// feedSub is a follower's subscription: events after revision from−1,
// in the watch's order.
type feedSub struct {
	events chan kvlease.Event
	lost   chan struct{} // closed when it was cut off or the watch ended
	from   uint64
}

// subscribe starts a subscription to the events after the last one passed
// through; it returns nil if the watch has ended. A previous subscription
// is cut off.
func (f *feed) subscribe() *feedSub {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.cutLocked()
	size := f.size
	if size == 0 {
		size = feedBuffer
	}
	f.sub = &feedSub{events: make(chan kvlease.Event, size), lost: make(chan struct{}), from: f.last + 1}
	return f.sub
}

// unsubscribe ends sub if it is still the subscription.
func (f *feed) unsubscribe(sub *feedSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sub == sub {
		f.cutLocked()
	}
}

// pass gives ev to the follower, or cuts the follower off if its buffer is
// full. It never blocks.
func (f *feed) pass(ev kvlease.Event) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = max(f.last, ev.Revision)
	if f.sub == nil {
		return
	}
	select {
	case f.sub.events <- ev:
	default:
		f.cutLocked()
	}
}

// close ends the feed: the watch has stopped.
func (f *feed) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cutLocked()
}

// ended reports whether the service's watch has ended.
func (f *feed) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closed
}

func (f *feed) cutLocked() {
	if f.sub != nil {
		close(f.sub.lost)
		f.sub = nil
	}
}
