package grantor

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/kvlease"
)

// Start's wait for the bucket's replay says every syncReportEvery that it
// still waits, and ends when the watch ends before it caught up: such a
// watch never catches up (its follower took the stream for gone, say),
// and Start waited for it until its ctx ended, the node serving nothing.
func TestAwaitSync(t *testing.T) {
	gone := errors.New("stream gone")
	for _, tc := range []struct {
		name        string
		sync, end   bool  // close synced, ended (synced first)
		cause       error // the watcher's Err
		want        error // nil: returns nil
		wantUnavail bool
	}{
		{name: "synced", sync: true},
		{name: "synced, then ended", sync: true, end: true, cause: gone},
		{name: "ended with an error", end: true, cause: gone, want: gone},
		{name: "ended without one", end: true, wantUnavail: true},
		{name: "neither: ctx ends", want: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var b strings.Builder
				s := &Service{log: slog.New(slog.NewTextHandler(&b, nil))}
				synced, ended := make(chan struct{}), make(chan struct{})
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				go func() {
					time.Sleep(25 * time.Second) // the bubble's clock: two reports first
					if tc.sync {
						close(synced)
					}
					if tc.end {
						close(ended)
					}
				}()
				err := s.awaitSync(ctx, synced, ended, func() error { return tc.cause })
				switch {
				case tc.want == nil && !tc.wantUnavail && err != nil:
					t.Fatalf("awaitSync: %v, want nil", err)
				case tc.want != nil && !errors.Is(err, tc.want):
					t.Fatalf("awaitSync: %v, want %v", err, tc.want)
				case tc.wantUnavail && !errors.Is(err, kvlease.ErrUnavailable):
					t.Fatalf("awaitSync: %v, want ErrUnavailable", err)
				}
				if n := strings.Count(b.String(), "replay has not caught up yet"); n < 2 {
					t.Errorf("%d reports in 25 s, want at least 2:\n%s", n, b.String())
				}
			})
		})
	}
}
