package telemetry

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

func TestFlapDetector(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, c := range []struct {
		name     string
		grants   []float64 // seconds
		changes  int
		flapping bool
	}{
		{"one grant", []float64{0}, 1, false},
		{"three in a minute", []float64{0, 10, 20}, 3, false},
		{"four in a minute", []float64{0, 10, 20, 30}, 4, true},
		{"four, spread out", []float64{0, 30, 61, 92}, 2, false},
		{"old ones age out", []float64{0, 1, 2, 3, 70}, 1, false},
		{"burst", []float64{0, 0.1, 0.2, 0.3, 0.4}, 5, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := NewFlapDetector(time.Minute, 3)
			var n int
			var flap bool
			for _, g := range c.grants {
				n, flap = f.Granted("l", at(g))
			}
			if n != c.changes || flap != c.flapping {
				t.Fatalf("changes %d flapping %v, want %d %v", n, flap, c.changes, c.flapping)
			}
		})
	}
	f := NewFlapDetector(0, 0)
	for i := range 4 {
		f.Granted("x", at(float64(i)))
	}
	if !f.Flapping("x", at(4)) || f.Flapping("x", at(70)) || f.Flapping("other", at(0)) {
		t.Fatal("Flapping does not follow the window")
	}
}

// The detector forgets a lease once its window has passed, without being
// asked: after 10,000 leases came and went, it holds only what is recent.
func TestFlapDetectorBounded(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	f := NewFlapDetector(time.Minute, 3)
	const n = 10_000
	for i := range n {
		f.Granted(fmt.Sprintf("lease-%d", i), t0.Add(time.Duration(i)*time.Millisecond))
	}
	if got := f.Len(); got != n {
		t.Fatalf("%d leases tracked inside the window, want %d", got, n)
	}
	// A lease that keeps flapping across the sweeps stays tracked.
	for i := range 5 {
		f.Granted("flappy", t0.Add(70*time.Second+time.Duration(i)*time.Second))
	}
	if got := f.Len(); got != 1 {
		t.Fatalf("%d leases tracked after their window passed, want 1 (flappy)", got)
	}
	if !f.Flapping("flappy", t0.Add(75*time.Second)) {
		t.Fatal("flappy lost its history in the sweep")
	}
	// Reads alone prune too (a grantor that only answers lists).
	if f.Flapping("other", t0.Add(10*time.Minute)) || f.Len() != 0 {
		t.Fatalf("%d leases tracked ten minutes later, want 0", f.Len())
	}
}

// A tenure counted twice (the grant's own answer and a watch's event of
// it) counts once, whichever comes first; a later tenure counts.
func TestFlapDetectorCountsATenureOnce(t *testing.T) {
	d := NewFlapDetector(time.Minute, 2)
	t0 := time.Now()
	for i, c := range []struct {
		token uint64
		want  int
	}{{5, 1}, {5, 1}, {9, 2}, {7, 2}, {9, 2}, {12, 3}} {
		if n, flapping := d.GrantedTenure("x", c.token, t0.Add(time.Duration(i)*time.Second)); n != c.want || flapping != (n > 2) {
			t.Errorf("tenure %d: %d changes (flapping %v), want %d", c.token, n, flapping, c.want)
		}
	}
}

// A burst of leases that then go quiet is forgotten by Sweep, with no
// other call: an idle serve kept the last minute of a churn of distinct
// names for good (found measuring serve's heap).
func TestFlapDetectorSweepForgetsAQuietBurst(t *testing.T) {
	f := NewFlapDetector(time.Minute, 3)
	t0 := time.Unix(1_000_000, 0)
	for i := range 10_000 {
		f.Granted(fmt.Sprint("burst.", i), t0)
	}
	f.Granted("steady", t0.Add(30*time.Second)) // still in the window at the sweep
	f.Sweep(t0.Add(59 * time.Second))           // not a window since the last sweep
	if n := f.Len(); n != 10_001 {
		t.Fatalf("%d leases kept before a window had passed, want 10001", n)
	}
	f.Sweep(t0.Add(61 * time.Second))
	if n := f.Len(); n != 1 {
		t.Fatalf("%d leases kept, want 1 (steady)", n)
	}
}

// The leases a sweep forgets give their room back: a Go map keeps the
// room it grew to, and an idle serve kept 8 MB of a burst's (found
// measuring serve's heap after a churn of distinct names stopped).
func TestFlapDetectorGivesBackABurstsRoom(t *testing.T) {
	f := NewFlapDetector(time.Minute, 3)
	t0 := time.Unix(1_000_000, 0)
	base := liveHeap()
	for i := range 200_000 {
		f.Granted(fmt.Sprint("burst.", i), t0)
	}
	grown := liveHeap()
	if grown < base+8<<20 {
		t.Fatalf("200,000 leases took %d bytes: too few to tell", int64(grown)-int64(base))
	}
	f.Sweep(t0.Add(2 * time.Minute))
	if after := liveHeap(); after > base+(grown-base)/8 {
		t.Errorf("live heap %d MB with the leases forgotten, %d MB before them, %d MB with them: their room was kept",
			after>>20, base>>20, grown>>20)
	}
	if n := f.Len(); n != 0 { // f is live until here
		t.Fatalf("%d leases kept, want none", n)
	}
}

// liveHeap is the bytes of live heap objects after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
