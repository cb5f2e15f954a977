package telemetry

import (
	"sync"
	"time"
)

// LogLimit lets a kind of log line through at most once a second and
// counts the others, which the next line reports (as "others_not_logged"):
// a line an event can cause at will (a bad request, a busy lease, a burst
// of late requests after a pause) must not add a line per event. The zero
// value is ready to use.
type LogLimit struct {
	mu      sync.Mutex
	last    time.Time
	skipped int
}

// Allow reports whether a line may be logged now and, if so, how many
// were not since the last one.
func (l *LogLimit) Allow() (skipped int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.last) < time.Second {
		l.skipped++
		return 0, false
	}
	skipped = l.skipped
	l.last, l.skipped = now, 0
	return skipped, true
}
