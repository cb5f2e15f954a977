package kvleasetest

import (
	"context"
	"log/slog"
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

// Warnings is a slog handler that sends the records at level Warn and
// above to its channel, dropping what does not fit:
// slog.New(kvleasetest.Warnings(ch)), for a test that waits on a warning.
type Warnings chan<- slog.Record

func (h Warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h Warnings) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h Warnings) WithGroup(string) slog.Handler                { return h }

func (h Warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Clone():
	default:
	}
	return nil
}
