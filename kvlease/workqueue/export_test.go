package workqueue

import (
	"context"
	"time"
)

// WaitStateSize waits until the queue's per-item state (pending and claimed
// entries) satisfies ok, or ctx ends; it returns the last sizes seen. It
// wakes on every change the queue applies: no polling.
func (q *Queue) WaitStateSize(ctx context.Context, ok func(pending, claimed int) bool) (pending, claimed int, err error) {
	for {
		q.mu.Lock()
		pending, claimed = len(q.pending), len(q.claimed)
		changed := q.changed
		q.mu.Unlock()
		if ok(pending, claimed) {
			return pending, claimed, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return pending, claimed, ctx.Err()
		}
	}
}

// SetBeforeCreate makes Add call f between its check that the item is not
// done and its create of the item.
func (q *Queue) SetBeforeCreate(f func()) { q.beforeCreate = f }

// SetAfterRaise makes Claim call f once it has raised an item's bar at
// the sink to its claim's token, before it hands the claim over.
func (q *Queue) SetAfterRaise(f func()) { q.afterRaise = f }

// SetBeforeGiveUp makes Claim call f as it decides to give an item up, before
// it writes the give-up at the sink.
func (q *Queue) SetBeforeGiveUp(f func()) { q.beforeGiveUp = f }

// MarkPending marks ids pending in the queue's own view, as the view of a
// worker that was paused while others completed them still has them.
func (q *Queue) MarkPending(ids ...string) {
	q.update(func() {
		for _, id := range ids {
			q.pending[id] = true
		}
	})
}

// SetItemMarkerTTL sets the TTL of the markers of removed items for the
// queues opened until the returned function restores it.
func SetItemMarkerTTL(d time.Duration) (restore func()) {
	was := itemMarkerTTL
	itemMarkerTTL = d
	return func() { itemMarkerTTL = was }
}

// MarkSent marks c as having sent a result, as a Complete that sent one and
// then failed does: a later Complete past the deadline reads the sink.
func (c *Claim) MarkSent() { c.sent.Store(true) }
