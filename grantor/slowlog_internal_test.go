package grantor

import (
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// Slow requests are logged at most once a second; the next line counts
// those not logged.
func TestSlowLogAtMostOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b strings.Builder
		log := slog.New(slog.NewTextHandler(&b, nil))
		var l slowLog
		for range 3 {
			l.note(log, "lease.v1.grant", "ok", 2*time.Second)
		}
		time.Sleep(999 * time.Millisecond) // the bubble's clock
		l.note(log, "lease.v1.grant", "ok", 2*time.Second)
		if n := strings.Count(b.String(), "slow request"); n != 1 {
			t.Fatalf("%d lines within a second, want 1:\n%s", n, b.String())
		}
		time.Sleep(time.Millisecond)
		l.note(log, "lease.v1.renew", "unavailable", 3*time.Second)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 2 || !strings.Contains(lines[1], "subject=lease.v1.renew") || !strings.Contains(lines[1], "others_not_logged=3") {
			t.Fatalf("lines %q; want a second one, a second later, counting the 3 not logged", lines)
		}
	})
}
