package client

import (
	"strconv"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
)

// The memory stays within seenMax leases however many are noted, the
// seenMax/2 noted last are all remembered, and an entry past the window
// no longer counts.
func TestSeenTokensBoundedAndRecent(t *testing.T) {
	var s seenTokens
	now := time.Unix(1_700_000_000, 0)
	const n = 10 * seenMax
	for i := range n {
		s.note("l"+strconv.Itoa(i), kvlease.Token(i+1), now)
		if got := len(s.cur) + len(s.old); got > seenMax {
			t.Fatalf("after %d notes %d entries, want at most %d", i+1, got, seenMax)
		}
	}
	for i := n - seenMax/2; i < n; i++ {
		if _, ok := s.newer("l"+strconv.Itoa(i), kvlease.Token(i), now); !ok {
			t.Fatalf("l%d, noted among the last %d, is forgotten", i, seenMax/2)
		}
	}
	last := "l" + strconv.Itoa(n-1)
	if _, ok := s.newer(last, n-1, now.Add(seenWindow)); ok {
		t.Fatalf("%s still counts after the window", last)
	}
	// A lower token does not overwrite a higher one within the window,
	// in either generation.
	s.note("l0-kept", 9, now)
	for i := range seenMax / 2 { // l0-kept moves to the old generation
		s.note("x"+strconv.Itoa(i), 1, now)
	}
	s.note("l0-kept", 3, now)
	if tok, ok := s.newer("l0-kept", 3, now); !ok || tok != 9 {
		t.Fatalf("newer(l0-kept, 3) = %d, %v, want 9, true", tok, ok)
	}
}

// A holder of many leases through one client notes every renewal: the
// cost per note must not grow with the leases held (it scanned all
// seenMax entries per note once past seenMax leases).
func BenchmarkSeenTokensNote(b *testing.B) {
	for _, leases := range []int{1000, 100_000} {
		b.Run("leases="+strconv.Itoa(leases), func(b *testing.B) {
			names := make([]string, leases)
			for i := range names {
				names[i] = "bench.live." + strconv.Itoa(i)
			}
			var s seenTokens
			now := time.Now()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				s.note(names[i%leases], kvlease.Token(i%leases+1), now)
				i++
			}
		})
	}
}
