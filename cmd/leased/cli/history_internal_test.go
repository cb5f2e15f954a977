package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
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

// A holder named with spaces, quotes or '=' is quoted in watch's text and
// in the tables, so that a line still splits into its fields (it printed
// `holder=odd holder <b>"x"`; found by an outside client).
func TestTextFieldsQuoteHolders(t *testing.T) {
	var b strings.Builder
	at := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	printEvent(printer{w: &b}, kvlease.Event{Type: kvlease.EventGranted, Name: "x", Holder: `odd holder <b>"x"`, Token: 3, Revision: 3, Time: at})
	printEvent(printer{w: &b}, kvlease.Event{Type: kvlease.EventGranted, Name: "y", Holder: "plain-1", Token: 4, Revision: 4, Time: at})
	want := "2026-12-06T12:00:00Z granted  x holder=\"odd holder <b>\\\"x\\\"\" token=3 revision=3\n" +
		"2026-12-06T12:00:00Z granted  y holder=plain-1 token=4 revision=4\n"
	if b.String() != want {
		t.Errorf("watch text:\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	printer{w: &b}.leases([]api.Lease{{Name: "x", Holder: "a b", Token: 3}})
	if !strings.Contains(b.String(), `x     "a b"`) {
		t.Errorf("ls table:\n%s\nwant the holder quoted", b.String())
	}
}

// A --since after now is refused, exit 2, as a negative one is: it printed
// the live leases alone, exit 0, as if the window had held nothing (found
// by an outside client). "0s" still asks for the live leases alone.
func TestHistorySinceInTheFuture(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for s, refused := range map[string]bool{
		"2026-12-07T13:00:00Z":          true,
		"9999-12-31T23:59:59Z":          true,
		"2026-12-07T12:00:00.001+00:00": true,
		"2026-12-07T11:00:00Z":          false,
		"0s":                            false,
		"1h":                            false,
	} {
		_, err := historySince(s, now)
		if got := err != nil; got != refused || refused && (exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "in the future")) {
			t.Errorf("--since %s: %v (exit %d); want refused %t, exit %d, saying it is in the future", s, err, exitCode(err), refused, ExitUsage)
		}
	}
}

// A read of the history that got nothing from a replicated stream says
// what leased status says of a stream without a quorum: it said only
// "nothing received for 2s" while status said why (found by an outside
// client).
func TestHistoryUnavailableHintsAtQuorum(t *testing.T) {
	idle := fmt.Errorf("%w: read history: nothing received for 2s", kvlease.ErrUnavailable)
	for _, c := range []struct {
		name     string
		err      error
		replicas int
		hint     bool
	}{
		{"R3, nothing received", idle, 3, true},
		{"R1, nothing received", idle, 1, false},
		{"R3, another error", errors.New("bad"), 3, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := historyReadHint(c.err, c.replicas)
			if !errors.Is(err, c.err) || strings.Contains(err.Error(), "leased status") != c.hint || strings.Contains(err.Error(), "majority") != c.hint {
				t.Errorf("historyReadHint(%v, R%d) = %v; want the error kept, a hint %t", c.err, c.replicas, err, c.hint)
			}
			if c.hint && noQuorumHint(err.Error()) != "" {
				t.Errorf("%v gets the hint again", err)
			}
		})
	}
}

// writeCounter counts the writes made to it.
type writeCounter struct {
	strings.Builder
	writes int
}

func (w *writeCounter) Write(b []byte) (int, error) { w.writes++; return w.Builder.Write(b) }

// The text tables reach stdout in large writes: the tabwriter wrote each
// cell and its padding on its own, 18 writes a row, and history's text
// of 100,000 tenures took 6.8 s against -o json's 1.3 s, the syscalls to
// an unbuffered stdout (found by an outside client: text 2× slower).
func TestTablesWriteInBlocks(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.Local)
	const rows = 2000
	ts := make([]history.Tenure, rows)
	ls := make([]api.Lease, rows)
	for i := range ts {
		ts[i] = history.Tenure{Name: fmt.Sprintf("jobs.n%d", i), Holder: "h", Token: uint64(i + 1), From: now.Add(-time.Minute), To: now, EndedBy: history.EndReleased}
		ls[i] = api.Lease{Name: fmt.Sprintf("jobs.n%d", i), Holder: "h", Token: uint64(i + 1), ExpiresAt: time.Now().Add(time.Minute)}
	}
	for _, c := range []struct {
		name  string
		print func(printer)
	}{
		{"history", func(p printer) { printTenures(p, ts, now) }},
		{"ls", func(p printer) { p.leases(ls) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var w writeCounter
			c.print(printer{w: &w})
			if lines := strings.Count(w.String(), "\n"); lines != rows+1 || w.writes > rows/10 {
				t.Errorf("%d lines in %d writes; want %d lines in at most %d", lines, w.writes, rows+1, rows/10)
			}
		})
	}
}
