package kvlease

import (
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// The revision cache mirrors what the bucket holds: an entry whose record
// and marker, or tombstone, the bucket no longer keeps is forgotten. A
// long-lived Store that touched many names (a worker claiming items of a
// large queue, a grantor granting fresh names) kept an entry for each of
// the last 262,144 names it ever saw, about 600 bytes each, however few
// were live (found churning unique names through serve: its heap grew with
// every name granted).
func TestRevCacheForgetsWhatTheBucketNoLonger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keep = time.Minute // the marker TTL
		const ttl = 5 * time.Second
		c := revCache{m: map[string]cacheEntry{}, keep: keep}
		rev := uint64(0)
		put := func(name string, ttl time.Duration) {
			rev++
			c.putSure(Record{Name: name, Holder: "w", Token: Token(rev), Revision: rev, TTL: ttl}, time.Now().Add(ttl), nil)
		}
		end := func(name string, hold time.Duration) {
			rev++
			h := nats.Header{}
			h.Set(hdrOp, "release")
			if hold > 0 {
				h.Set(hdrOp, "revoke")
				h.Set(hdrHold, strconv.FormatInt(hold.Milliseconds(), 10))
			}
			c.markGone(name, tombstoneOf(rev, time.Now(), h))
		}
		put("held", ttl)
		const n = 10_000
		for i := range n {
			name := fmt.Sprintf("claim.q.%d", i)
			put(name, ttl)
			end(name, 0)
		}
		put("revoked", ttl)
		end("revoked", 10*time.Minute) // its hold outlasts the marker TTL
		// Past the marker TTL and a sweep's period, the held lease renewed
		// throughout.
		for range (keep + revCacheSweep + ttl) / (keep / 4) {
			time.Sleep(keep / 4)
			put("held", ttl)
		}
		if got := len(c.m); got != 2 {
			t.Fatalf("%d entries after %d names ended a marker TTL ago; want 2 (the held lease, the revoked one's hold)", got, n)
		}
		if _, ok := c.get("held", rev); !ok {
			t.Fatal("the held lease's entry was forgotten")
		}
		if r, tomb := c.lastGone("revoked"); r == 0 || tomb == nil {
			t.Fatal("the revoked lease's end was forgotten before its hold")
		}
		for range 10 {
			time.Sleep(revCacheSweep)
			put("held", ttl)
		}
		if got := len(c.m); got != 1 {
			t.Fatalf("%d entries after the hold ended; want 1", got)
		}
	})
}
