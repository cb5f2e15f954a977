package grantor

import (
	"fmt"
	"testing"

	"github.com/leased/leased/kvlease"
)

// The per-holder index keeps, per lease, only what is live: a release the
// service answers after its watch has already applied the tombstone (the
// watch is fast, the handler slow) left an "ahead" entry that no later
// event of the name removed, one per released name for good (found
// churning unique names through serve: the heap grew with every name
// ever released).
func TestHolderIndexForgetsReleasedNames(t *testing.T) {
	for _, tc := range []struct {
		name          string
		streamFirst   bool // the watch applies the tombstone before the service's released
		wantAheadLeft int  // right after the releases
	}{
		{name: "watch applies the end first", streamFirst: true},
		{name: "service answers first", wantAheadLeft: 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolderIndex()
			rev := uint64(0)
			apply := func(ev kvlease.Event) { h.apply(ev, func(kvlease.Event) {}, func(int) {}) }
			const n = 1000
			var pending []kvlease.Event
			for i := range n {
				name, holder := fmt.Sprintf("job.%d", i), fmt.Sprintf("worker-%d", i)
				rev++
				granted := rev
				h.granted(name, holder, granted)
				rec := &kvlease.Record{Name: name, Holder: holder, Token: kvlease.Token(granted), Revision: granted}
				apply(kvlease.Event{Type: kvlease.EventGranted, Name: name, Holder: holder, Token: rec.Token, Revision: granted, Record: rec})
				rev++
				end := kvlease.Event{Type: kvlease.EventReleased, Name: name, Holder: holder, Token: rec.Token, Revision: rev}
				if tc.streamFirst {
					apply(end)
				} else {
					pending = append(pending, end)
				}
				h.released(name, granted)
			}
			h.mu.Lock()
			ahead, live, holders := len(h.ahead), len(h.byName), len(h.count)
			h.mu.Unlock()
			if ahead != tc.wantAheadLeft || live != 0 || holders != 0 {
				t.Fatalf("after %d grants and releases: %d ahead, %d live, %d holders; want %d, 0, 0", n, ahead, live, holders, tc.wantAheadLeft)
			}
			for _, ev := range pending {
				apply(ev)
			}
			h.mu.Lock()
			ahead = len(h.ahead)
			h.mu.Unlock()
			if ahead != 0 {
				t.Fatalf("after the watch caught up: %d names ahead, want 0", ahead)
			}
		})
	}
}
