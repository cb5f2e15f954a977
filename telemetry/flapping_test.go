package telemetry

import (
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
