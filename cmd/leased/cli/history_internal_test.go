package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/history"
)

// Times of day are today's; an earlier day's tenure shows its date (the
// history keeps a day by default, and its rows read as today's; found by
// an outside client).
func TestHistoryTimesCarryTheirDay(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.Local)
	var b strings.Builder
	printTenures(printer{w: &b}, []history.Tenure{
		{Name: "a", Holder: "h", Token: 1, From: now.Add(-26 * time.Hour), To: now.Add(-25 * time.Hour), EndedBy: history.EndReleased},
		{Name: "b", Holder: "h", Token: 2, From: now.Add(-time.Minute)},
	}, now)
	out := b.String()
	if !strings.Contains(out, "2026-12-04 08:00:00.000") || !strings.Contains(out, " 09:59:00.000") || strings.Contains(out, "2026-12-05") {
		t.Fatalf("history rows:\n%s\nwant yesterday's with its date, today's without", out)
	}
	// A live tenure's renewals are counted at its end: not shown as 0.
	if live := strings.Split(strings.TrimSpace(out), "\n")[2]; !strings.Contains(live, " -  ") || !strings.Contains(live, "live") {
		t.Fatalf("live row %q: want its renewals shown as -", live)
	}
}
