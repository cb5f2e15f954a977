package faultcheck_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

const (
	ok        = faultcheck.CodeOK
	held      = faultcheck.CodeHeld
	notHolder = faultcheck.CodeNotHolder
	conflict  = faultcheck.CodeConflict
	pending   = faultcheck.CodePending
)

// Each case is one kind of violation, or a history that has none; want
// lists the kinds Check must report, exactly (sorted, with repeats).
func TestCheckViolations(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      *hist
		params func(*faultcheck.Params)
		want   []faultcheck.ViolationKind
	}{{
		name: "clean handovers",
		h: newHist().
			grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1010, 5, 5, 6).release("h1", "L", 2000, 2010, 5, 6).
			grant("h2", "L", 2100, 2110, 9).
			grantFails("h3", "L", 2500, 2510, held, 9).
			grant("h3", "L", 6000, 6010, 12), // h2's window ended at 2100 + 2697
	}, {
		// h2's grant reply (1010) arrives before h1's window end (2697).
		name: "overlap: a grant inside another holder's window",
		h:    newHist().grant("h1", "L", 0, 10, 5).grant("h2", "L", 1000, 1010, 9),
		want: []faultcheck.ViolationKind{faultcheck.Overlap},
	}, {
		// The grant comes 2 ms before h1's renewed window ends at
		// 1000 + 2697: the arithmetic counts from the renewal's send.
		name: "overlap: a grant just inside a renewed window",
		h:    newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1900, 5, 5, 6).grant("h2", "L", 3500, 3695, 9),
		want: []faultcheck.ViolationKind{faultcheck.Overlap},
	}, {
		// h2's grant falls in h1's window, and h1's late renewal (accepted
		// after h2's grant: stale) in h2's: one overlap of the two tenures.
		name: "overlap: reported once per pair of tenures",
		h:    newHist().grant("h1", "L", 0, 10, 5).grant("h2", "L", 1000, 1010, 9).renew("h1", "L", 3000, 3010, 5, 5, 10),
		want: []faultcheck.ViolationKind{faultcheck.LostAck, faultcheck.Overlap, faultcheck.StaleAccepted},
	}, {
		// The same, 2 ms after it ends: clean.
		name: "no overlap: a grant just after a renewed window",
		h:    newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1900, 5, 5, 6).grant("h2", "L", 3500, 3699, 9),
	}, {
		// A renewal is a new window only once acknowledged, and a
		// released or refused holder holds no longer.
		name: "no overlap: windows end at a release, a refusal, an unanswered renewal",
		h: newHist().
			grant("h1", "L", 0, 10, 5).release("h1", "L", 500, 510, 5, 5).grant("h2", "L", 600, 610, 9).
			grant("h3", "M", 0, 10, 6).renewFails("h3", "M", 500, 510, 6, 6, notHolder, 0).grant("h4", "M", 600, 610, 10).
			grant("h5", "N", 0, 10, 7).renewFails("h5", "N", 1000, 1400, 7, 7, faultcheck.CodeNoReply, 0).grant("h6", "N", 2700, 2710, 50),
	}, {
		name: "stale tenure: a release of an older tenure accepted after a newer grant",
		h:    newHist().grant("h1", "L", 0, 10, 5).grant("h2", "L", 3000, 3010, 9).release("h1", "L", 3100, 3110, 5, 5),
		want: []faultcheck.ViolationKind{faultcheck.StaleAccepted},
	}, {
		// The renewal also opens a window beside h2's, and shows the
		// lease at token 5 after 9 was acknowledged.
		name: "stale tenure: a renewal of an older tenure accepted after a newer grant",
		h:    newHist().grant("h1", "L", 0, 10, 5).grant("h2", "L", 3000, 3010, 9).renew("h1", "L", 3100, 3110, 5, 5, 10),
		want: []faultcheck.ViolationKind{faultcheck.LostAck, faultcheck.Overlap, faultcheck.StaleAccepted},
	}, {
		// Sent before the newer grant's reply arrived, the release may
		// have been applied first: not provably stale.
		name: "no stale tenure: a release concurrent with the newer grant",
		h:    newHist().grant("h1", "L", 0, 10, 5).release("h1", "L", 2990, 3020, 5, 5).grant("h2", "L", 3000, 3010, 9),
	}, {
		name: "token not increasing: below an earlier grant of another lease",
		h:    newHist().grant("h1", "L", 0, 10, 20).grant("h2", "M", 100, 110, 15),
		want: []faultcheck.ViolationKind{faultcheck.TokenNotIncreasing},
	}, {
		name: "token not increasing: below an earlier renewal's revision",
		h:    newHist().grant("h1", "L", 0, 10, 20).renew("h1", "L", 500, 510, 20, 20, 31).grant("h2", "M", 600, 610, 30),
		want: []faultcheck.ViolationKind{faultcheck.TokenNotIncreasing},
	}, {
		// Grants that overlap in time are not ordered: 15 after 20 is
		// fine when neither reply came before the other's send.
		name: "no token order between concurrent grants",
		h:    newHist().grant("h1", "L", 0, 100, 20).grant("h2", "M", 50, 150, 15),
	}, {
		name: "token reused: one token to two holders",
		h:    newHist().grant("h1", "L", 0, 100, 20).grant("h2", "M", 50, 150, 20),
		want: []faultcheck.ViolationKind{faultcheck.TokenReused},
	}, {
		name: "token reused: reissued after a kill-all, to the same lease",
		h: newHist().grant("h1", "L", 0, 10, 20).release("h1", "L", 100, 110, 20, 20).
			fault(faultcheck.FaultKillAll, "cluster", 200, 1200).grant("h2", "L", 1500, 1510, 20),
		want: []faultcheck.ViolationKind{faultcheck.TokenNotIncreasing, faultcheck.TokenReused},
	}, {
		// The renewal to revision 8 was acknowledged; a later renewal
		// names 8 and the cluster answers conflict at 6.
		name: "lost ack: a conflict shows a revision below an acknowledged renewal",
		h: newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 900, 910, 5, 5, 8).
			fault(faultcheck.FaultKillAll, "cluster", 1000, 1500).renewFails("h1", "L", 1800, 1810, 5, 8, conflict, 6),
		want: []faultcheck.ViolationKind{faultcheck.LostAck},
	}, {
		name: "lost ack: a get shows an older tenure than an acknowledged grant",
		h: newHist().grant("h1", "L", 0, 10, 5).release("h1", "L", 500, 510, 5, 5).grant("h2", "L", 600, 610, 9).
			get("h3", "L", 700, 710, 5, 5),
		want: []faultcheck.ViolationKind{faultcheck.LostAck},
	}, {
		name: "lost ack: a held error names an older tenure",
		h: newHist().grant("h1", "L", 0, 10, 5).release("h1", "L", 500, 510, 5, 5).grant("h2", "L", 600, 610, 9).
			grantFails("h3", "L", 700, 710, held, 5),
		want: []faultcheck.ViolationKind{faultcheck.LostAck},
	}, {
		name:   "reads ignored: the same held error is no evidence",
		params: func(p *faultcheck.Params) { p.IgnoreReads = true },
		h: newHist().grant("h1", "L", 0, 10, 5).release("h1", "L", 500, 510, 5, 5).grant("h2", "L", 600, 610, 9).
			grantFails("h3", "L", 700, 710, held, 5),
	}, {
		// A compare-and-set is no read: it counts with IgnoreReads too.
		name:   "lost ack: a renewal succeeds at a revision below an acknowledged one",
		params: func(p *faultcheck.Params) { p.IgnoreReads = true },
		h:      newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 900, 910, 5, 5, 8).renew("h1", "L", 1800, 1810, 5, 8, 7),
		want:   []faultcheck.ViolationKind{faultcheck.LostAck},
	}, {
		// A read concurrent with the renewal may see it or not.
		name: "no lost ack: a get concurrent with a renewal",
		h:    newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 900, 950, 5, 5, 8).get("h2", "L", 920, 930, 5, 5),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.h.history()
			if err != nil {
				t.Fatal(err)
			}
			p := faultcheck.DefaultParams()
			if tc.params != nil {
				tc.params(&p)
			}
			rep, err := faultcheck.Check(h, p)
			if err != nil {
				t.Fatal(err)
			}
			var got []faultcheck.ViolationKind
			for _, v := range rep.Violations {
				got = append(got, v.Kind)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want kinds %v", rep.Violations, tc.want)
			}
			if err := rep.Err(); (err != nil) != (len(tc.want) > 0) || (err != nil && !errors.Is(err, faultcheck.ErrViolation)) {
				t.Errorf("Err() = %v with %d violations expected", err, len(tc.want))
			}
		})
	}
}

// A violation names the operations that show it.
func TestViolationNamesItsOperations(t *testing.T) {
	h, err := newHist().grant("h1", "L", 0, 10, 5).renew("h1", "L", 100, 110, 5, 5, 6).grant("h2", "L", 1000, 1010, 9).history()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := faultcheck.Check(h, faultcheck.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	want := []faultcheck.OpRef{{Proc: "h1", Seq: 1}, {Proc: "h2", Seq: 1}}
	if len(rep.Violations) != 1 || rep.Violations[0].Lease != "L" || !slices.Equal(rep.Violations[0].Ops, want) {
		t.Fatalf("violations %v, want one overlap on L naming %v", rep.Violations, want)
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func TestCheckFigures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     *hist
		check func(t *testing.T, f faultcheck.Figures)
	}{{
		// Holding: h1 [10, 2000) (its release), h2 [2110, 5797) (renewed
		// at 3100), h3 [7010, 9697) (windows count from the send); the run is [0, 10000).
		name: "clean handovers: a release, an abandon",
		h: newHist().
			grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1010, 5, 5, 6).release("h1", "L", 2000, 2010, 5, 6).
			grant("h2", "L", 2100, 2110, 9).renew("h2", "L", 3100, 3110, 9, 9, 10).
			grant("h3", "L", 7000, 7010, 12).
			op("end", "L", faultcheck.OpGet, 10000, 10000, faultcheck.Request{}, faultcheck.CodeNotFound, faultcheck.Reply{}),
		check: func(t *testing.T, f faultcheck.Figures) {
			if f.Tenures != 3 || f.Renewals != 2 || f.Releases != 1 || f.RenewalsRefused != 0 || f.FalseLosses != 0 {
				t.Errorf("counts %+v", f)
			}
			if got, want := f.Availability, (1990.0+3687+2687)/10000; !near(got, want) {
				t.Errorf("availability %v, want %v", got, want)
			}
			if got := f.AvailabilityByLease["L"]; got != f.Availability {
				t.Errorf("availability of L %v, of all %v", got, f.Availability)
			}
			if got, want := f.Handover[faultcheck.AfterRelease], (faultcheck.Durations{N: 1, Min: ms(110), Median: ms(110), Max: ms(110)}); got != want {
				t.Errorf("handover after release %+v, want %+v", got, want)
			}
			if got, want := f.Handover[faultcheck.AfterAbandon], (faultcheck.Durations{N: 1, Min: ms(1213), Median: ms(1213), Max: ms(1213)}); got != want {
				t.Errorf("handover after abandon %+v, want %+v", got, want)
			}
		},
	}, {
		// h1's window ends at 2697; it sends a release at 5000 (it was
		// paused, say), after h2 was granted the lease at 4010: the
		// tenure was abandoned, not released, and the handover counts
		// from its window's end.
		name: "a release sent after the window is no release",
		h: newHist().grant("h1", "L", 0, 10, 5).grant("h2", "L", 4000, 4010, 9).
			op("h1", "L", faultcheck.OpRelease, 5000, 5010, faultcheck.Request{Token: 5, Revision: 5}, notHolder, faultcheck.Reply{}),
		check: func(t *testing.T, f faultcheck.Figures) {
			if got, ok := f.Handover[faultcheck.AfterRelease]; ok {
				t.Errorf("handover after release %+v, want none", got)
			}
			if got := f.Handover[faultcheck.AfterAbandon]; got.N != 1 || got.Median != ms(1313) {
				t.Errorf("handover after abandon %+v, want 1.313s", got)
			}
		},
	}, {
		// h1 is killed at 500 and h2 gets the lease at 4510; h3 is paused
		// at 500 on M and h4 gets it at 5510.
		name: "handover after a crash and a pause; faults by kind; availability around them",
		h: newHist().
			grant("h1", "L", 0, 10, 5).fault(faultcheck.FaultKillHolder, "h1", 500, 500).grant("h2", "L", 4500, 4510, 9).
			grant("h3", "M", 0, 10, 6).fault(faultcheck.FaultStopHolder, "h3", 500, 8000).grant("h4", "M", 5500, 5510, 10).
			fault(faultcheck.FaultKillNode, "n2", 3000, 4000).fault(faultcheck.FaultKillNode, "n3", 3500, 4200),
		check: func(t *testing.T, f faultcheck.Figures) {
			if got := f.Handover[faultcheck.AfterCrash]; got.N != 1 || got.Median != ms(4010) {
				t.Errorf("handover after crash %+v, want 4.01s", got)
			}
			if got := f.Handover[faultcheck.AfterPause]; got.N != 1 || got.Median != ms(5010) {
				t.Errorf("handover after pause %+v, want 5.01s", got)
			}
			if got := f.FaultsByKind; got[faultcheck.FaultKillNode] != 2 || got[faultcheck.FaultKillHolder] != 1 || got[faultcheck.FaultStopHolder] != 1 {
				t.Errorf("faults by kind %v", got)
			}
			// Around kill_node: [3000, 4200) plus 10 s, clipped to the
			// run's end at 8000. L holds [4510, 7197), M [5510, 8000).
			if got, want := f.AvailabilityAround[faultcheck.FaultKillNode], (2687.0+2490)/(2*5000); !near(got, want) {
				t.Errorf("availability around kill_node %v, want %v", got, want)
			}
		},
	}, {
		// A fault the history stopped in counts to the run's end (the get
		// at 20 s); L holds [10, 2697).
		name: "a fault that never ended",
		h: newHist().grant("h1", "L", 0, 10, 5).fault(faultcheck.FaultKillAll, "cluster", 1000, -1).
			op("end", "L", faultcheck.OpGet, 20000, 20000, faultcheck.Request{}, faultcheck.CodeNotFound, faultcheck.Reply{}),
		check: func(t *testing.T, f faultcheck.Figures) {
			if got, want := f.AvailabilityAround[faultcheck.FaultKillAll], 1697.0/19000; !near(got, want) {
				t.Errorf("availability around kill_all %v, want %v", got, want)
			}
		},
	}, {
		// Refused at 1000, inside the window to 2697: a false loss. h2's
		// renewal comes after its window (a paused holder): no loss of
		// ours. h3's second refusal follows its first: counted once. h4
		// and h5 renew just inside the window; h4's answer comes after
		// the grantor may give the tenure up (the cutoff, 3896: a TTL of
		// 4 s less 4 ms and a 100 ms guard), a lapse no grantor can
		// undo, h5's before it: a false loss.
		name: "false losses",
		h: newHist().
			grant("h1", "L", 0, 10, 5).renewFails("h1", "L", 1000, 1010, 5, 5, notHolder, 0).
			grant("h2", "M", 0, 10, 6).renewFails("h2", "M", 3000, 3010, 6, 6, faultcheck.CodeExpired, 0).
			grant("h3", "N", 0, 10, 7).renewFails("h3", "N", 500, 510, 7, 7, faultcheck.CodeExpired, 0).
			renewFails("h3", "N", 600, 610, 7, 7, faultcheck.CodeExpired, 0).
			grant("h4", "O", 0, 10, 8).renewFails("h4", "O", 2600, 3900, 8, 8, faultcheck.CodeExpired, 0).
			grant("h5", "P", 0, 10, 9).renewFails("h5", "P", 2600, 3890, 9, 9, faultcheck.CodeExpired, 0),
		check: func(t *testing.T, f faultcheck.Figures) {
			if f.FalseLosses != 3 || f.RenewalsRefused != 6 {
				t.Errorf("false losses %d of %d refused, want 3 of 6", f.FalseLosses, f.RenewalsRefused)
			}
		},
	}, {
		// h1 was killed with its grant in flight; h2 is told token 7
		// holds L. On M a get shows token 9 that nobody asked for.
		name: "orphan and unknown tenures",
		h: newHist().
			grantFails("h1", "L", 0, 0, pending, 0).grantFails("h2", "L", 1000, 1010, held, 7).
			grantFails("h2", "L", 1500, 1510, held, 7).
			get("h3", "M", 1000, 1010, 9, 9),
		check: func(t *testing.T, f faultcheck.Figures) {
			if f.Orphans != 1 || f.UnknownTenures != 1 || f.Tenures != 0 {
				t.Errorf("orphans %d, unknown %d, tenures %d; want 1, 1, 0", f.Orphans, f.UnknownTenures, f.Tenures)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := tc.h.history()
			if err != nil {
				t.Fatal(err)
			}
			rep, err := faultcheck.Check(h, faultcheck.DefaultParams())
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) > 0 {
				t.Errorf("violations: %v", rep.Violations)
			}
			tc.check(t, rep.Figures)
		})
	}
}

// With IgnoreReads, a held error naming an older tenure is a stale read,
// counted; without, a lost acknowledgement.
func TestStaleReadsCounted(t *testing.T) {
	h, err := newHist().grant("h1", "L", 0, 10, 5).release("h1", "L", 500, 510, 5, 5).grant("h2", "L", 600, 610, 9).
		grantFails("h3", "L", 700, 710, held, 5).grantFails("h3", "L", 800, 810, held, 9).history()
	if err != nil {
		t.Fatal(err)
	}
	p := faultcheck.DefaultParams()
	p.IgnoreReads = true
	rep, err := faultcheck.Check(h, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 0 || rep.Figures.StaleReads != 1 || len(rep.StaleReads) != 1 {
		t.Errorf("with IgnoreReads: violations %v, stale reads %d %v; want none and 1", rep.Violations, rep.Figures.StaleReads, rep.StaleReads)
	}
	if rep, _ = faultcheck.Check(h, faultcheck.DefaultParams()); len(rep.Violations) != 1 || rep.Figures.StaleReads != 0 {
		t.Errorf("without: violations %v, stale reads %d; want one lost ack and 0", rep.Violations, rep.Figures.StaleReads)
	}
}

func near(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

func TestParamsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*faultcheck.Params)
		ok   bool
	}{
		{"defaults", func(*faultcheck.Params) {}, true},
		{"rho 0", func(p *faultcheck.Params) { p.Rho = 0 }, true},
		{"rho negative", func(p *faultcheck.Params) { p.Rho = -1e-3 }, false},
		{"rho 1", func(p *faultcheck.Params) { p.Rho = 1 }, false},
		{"around negative", func(p *faultcheck.Params) { p.Around = -time.Second }, false},
		{"max late 0", func(p *faultcheck.Params) { p.MaxLate = 0 }, true},
		{"max late negative", func(p *faultcheck.Params) { p.MaxLate = -time.Second }, false},
		{"grantor margin negative", func(p *faultcheck.Params) { p.GrantorMargin = -time.Second }, false},
		{"to before from", func(p *faultcheck.Params) { p.From, p.To = 10, 5 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := faultcheck.DefaultParams()
			tc.set(&p)
			err := p.Validate()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, faultcheck.ErrInvalidParams)) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tc.ok)
			}
			if _, err := faultcheck.Check(&faultcheck.History{}, p); (err == nil) != tc.ok {
				t.Fatalf("Check: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
