package kvleasetest

import (
	"strings"
	"sync"
)

// Logs is a log destination safe for a logger's concurrent writes (a
// Store's or a service's goroutines), read back whole with String:
// slog.New(slog.NewJSONHandler(&logs, nil)).
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
