package faultcheck_test

import (
	"slices"
	"testing"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

const (
	noReply     = faultcheck.CodeNoReply
	requestUsed = "request_used" // the service's code for a retry whose tenure has ended
)

// A recovered grant's window counts from the send of its request's first
// attempt, as kvlease.Acquire counts the holder's deadline: the tenure may
// have been stored by that attempt, so the grantor's TTL, ceil(D + m_g) =
// 4 s, counts from soon after it. Here h1's first attempt (at 10 000) got
// no reply; its retry at 12 000 was answered with the tenure it made.
// h1's window is [12 010, 12 697), not [12 010, 14 697).
func TestRecoveredGrantWindow(t *testing.T) {
	first := func() *hist {
		return newHist().
			attempt("h1", "L", "r1", 10000, 11000, noReply, faultcheck.Reply{}).
			grant("h3", "M", 10500, 10510, 7). // a newer token, acknowledged between the attempts
			recovered("h1", "L", "r1", 12000, 12010, 5)
	}
	for _, tc := range []struct {
		name string
		h    *hist
		want []faultcheck.ViolationKind
	}{{
		// h2 is granted L at 14 100: after 10 000 + 4 s, when the first
		// attempt's tenure lapsed, but before 12 000 + 2697. Counted from
		// the retry's send, h1 would still hold (a false overlap), and
		// token 5 would look granted after 7 was acknowledged.
		name: "the next tenure after the first attempt's TTL",
		h:    first().grant("h2", "L", 14100, 14110, 9),
	}, {
		name: "a grant inside the window is still an overlap",
		h:    first().grant("h2", "L", 12400, 12500, 9),
		want: []faultcheck.ViolationKind{faultcheck.Overlap},
	}, {
		// An attempt of another process with the same request id is not
		// h1's first: h1's window still counts from 10 000, and h2's
		// grant at 12 500 is inside it.
		name: "another process's request id is not the first attempt",
		h: newHist().attempt("h0", "L", "r1", 1000, 2000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 10000, 11000, noReply, faultcheck.Reply{}).
			recovered("h1", "L", "r1", 12000, 12010, 5).grant("h2", "L", 12400, 12500, 9),
		want: []faultcheck.ViolationKind{faultcheck.Overlap},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rep := check(t, tc.h, false)
			var got []faultcheck.ViolationKind
			for _, v := range rep.Violations {
				got = append(got, v.Kind)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations %v, want kinds %v", rep.Violations, tc.want)
			}
		})
	}
	// A renewal refused at 13 000 comes after the window the holder had
	// (to 12 697): no false loss, as it would be counted from the retry.
	rep := check(t, first().renewFails("h1", "L", 13000, 13010, 5, 5, notHolder, 0), false)
	if rep.Figures.FalseLosses != 0 {
		t.Errorf("%d false losses, want 0", rep.Figures.FalseLosses)
	}
}

// Orphans are put down to grant requests: attempts that share a request
// id are one request, and an orphan whose request was retried and whose
// last attempt was answered (anything but unavailable, internal or no
// reply) is a retried orphan, which idempotent grants and Acquire's wait
// after a refusal are meant to prevent, unless a request of a caller that
// gave up explains it, or the answer came when the tenure may have lapsed.
func TestOrphansRetried(t *testing.T) {
	for _, tc := range []struct {
		name                                  string
		h                                     *hist
		orphans, retried, late, lapsed, unkno int
		answer                                string   // of the retried orphan
		attempts                              []uint64 // h1's seqs, of the first orphan
	}{{
		// h1 tried twice with no answer and gave up; h2 is told h1 holds
		// token 7.
		name: "gave up",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 1050, 2050, faultcheck.CodeUnavailable, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 1500, 1510, held, heldBy("h1", 7)),
		orphans: 1, attempts: []uint64{1, 2},
	}, {
		// h1's retry came when the tenure its first attempt made may
		// have lapsed (its TTL, 4 s, after that attempt was sent), and
		// was told so: true, for all the checker can tell (the holder of
		// the nemesis suite whose connection was to a stopped node).
		name: "retried: the tenure may have lapsed first",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 500, 510, held, heldBy("h1", 7)).
			attempt("h1", "L", "r1", 5050, 5060, requestUsed, faultcheck.Reply{}),
		orphans: 1, retried: 1, lapsed: 1, answer: requestUsed, attempts: []uint64{1, 2},
	}, {
		// Told so before the tenure could have lapsed: a false answer.
		name: "retried: told the tenure had ended before it could have",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 500, 510, held, heldBy("h1", 7)).
			attempt("h1", "L", "r1", 3050, 3060, requestUsed, faultcheck.Reply{}),
		orphans: 1, retried: 1, answer: requestUsed, attempts: []uint64{1, 2},
	}, {
		// Answered late enough, but held by the tenure its own first
		// attempt made: the grantor saw that tenure live, and a retry
		// of the request that made it is answered with it. Not lapsed,
		// however late.
		name: "retried: held by its own tenure after its TTL",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 5050, 5060, held, heldBy("h1", 7)),
		orphans: 1, retried: 1, answer: held, attempts: []uint64{1, 2},
	}, {
		// Told so late enough, but a reply to a request sent after the
		// answer shows the tenure still held: a false answer too.
		name: "retried: told the tenure had ended, and it is held after",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 5050, 5060, requestUsed, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 5100, 5110, held, heldBy("h1", 7)),
		orphans: 1, retried: 1, answer: requestUsed, attempts: []uint64{1, 2},
	}, {
		// What a grantor without idempotent grants does: the retry is
		// told held by the tenure its own first attempt made.
		name: "retried: held by its own tenure",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 1050, 1060, held, heldBy("h1", 7)),
		orphans: 1, retried: 1, answer: held, attempts: []uint64{1, 2},
	}, {
		// h1's retry was told held (by h2, whose tenure then ended), and
		// the attempt it sent once that attempt's late window had passed
		// got no answer either before h1's time ran out; one of them made
		// token 7. h1 stopped on no answer: it gave up, it did not stop on
		// the refusal.
		name: "gave up after an answered retry",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			grant("h2", "L", 500, 510, 5).
			attempt("h1", "L", "r1", 1050, 1060, held, heldBy("h2", 5)).
			release("h2", "L", 2000, 2010, 5, 5).
			attempt("h1", "L", "r1", 2500, 3500, noReply, faultcheck.Reply{}).
			attempt("h3", "L", "r3", 4000, 4010, held, heldBy("h1", 7)),
		orphans: 1, attempts: []uint64{1, 2, 3},
	}, {
		// The retry recovered the tenure: no orphan.
		name: "retried: recovered",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 500, 510, held, heldBy("h1", 7)).
			recovered("h1", "L", "r1", 1050, 1060, 7),
	}, {
		// Without request ids every attempt is a request of its own: the
		// second is no retry of the first.
		name: "no request ids",
		h: newHist().grantFails("h1", "L", 0, 1000, noReply, 0).
			op("h1", "L", faultcheck.OpGrant, 1050, 1060, faultcheck.Request{D: int64(d3)}, held, heldBy("h1", 7)),
		orphans: 1, attempts: []uint64{1},
	}, {
		// h1's request r2 (seqs 2, 3), which also gave up, has the
		// latest unanswered attempt before the reply that shows token 8.
		// But it was first sent after token 10 was acknowledged, so it
		// cannot have made 8: r1 (seq 1) did.
		name: "exact: by token order",
		h: newHist().attempt("h1", "L", "r1", 0, 100, noReply, faultcheck.Reply{}).
			grant("h3", "M", 200, 210, 10).
			attempt("h1", "L", "r2", 300, 1300, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r2", 1350, 2350, noReply, faultcheck.Reply{}).
			attempt("h4", "L", "r4", 1500, 1510, held, heldBy("h1", 8)),
		orphans: 1, attempts: []uint64{1},
	}, {
		// h5's attempt is the later, but the reply names h1.
		name: "exact: by the holder the reply names",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h5", "L", "r5", 1000, 2000, noReply, faultcheck.Reply{}).
			attempt("h4", "L", "r4", 1500, 1510, held, heldBy("h1", 8)),
		orphans: 1, attempts: []uint64{1},
	}, {
		// What a paused node does when it resumes: it carries out the
		// attempts queued in it, r1's (which gave up meanwhile) and r2's
		// first; one made token 7, and r2's retry is told held by it. r2
		// has the later attempt, but had r2 made 7 its retry would have
		// been answered with it: r1's, which gave up, explains the orphan
		// as well, and an orphan counts as retried only if nothing else
		// does.
		name: "a caller that gave up explains it first",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 1050, 2050, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r2", 3000, 4000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r2", 4050, 4060, held, heldBy("h1", 7)),
		orphans: 1, attempts: []uint64{1, 2},
	}, {
		// The same, but token 7 was stored after h3's renewal to revision
		// 6 was sent at 40 000: r1's attempts, 38 s before, are past
		// MaxLate (30 s), and only r2, retried, explains it.
		name: "too late to explain",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 1050, 2050, noReply, faultcheck.Reply{}).
			grant("h3", "M", 39000, 39010, 5).renew("h3", "M", 40000, 40010, 5, 5, 6).
			attempt("h1", "L", "r2", 40500, 41500, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r2", 41550, 41560, held, heldBy("h1", 7)),
		orphans: 1, retried: 1, late: 0, answer: held, attempts: []uint64{3, 4},
	}, {
		// h1's retry is told held by h2's token 5; h2 renews it (to
		// revision 8, sent at 1500, after the answer) and releases it;
		// then h1's first attempt, carried out late, makes token 9, which
		// h3 is shown: stored after h1 had its answer.
		name: "retried: the first attempt carried out after the retry's answer",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			grant("h2", "L", 500, 510, 5).
			attempt("h1", "L", "r1", 1050, 1060, held, heldBy("h2", 5)).
			renew("h2", "L", 1500, 1510, 5, 5, 8).release("h2", "L", 2000, 2010, 5, 8).
			attempt("h3", "L", "r3", 2500, 2510, held, heldBy("h1", 9)),
		orphans: 1, retried: 1, late: 1, answer: held, attempts: []uint64{1, 2},
	}, {
		// One request makes one tenure at most: two unknown tokens are
		// one orphan and one unknown tenure.
		name: "one request, one orphan",
		h: newHist().attempt("h1", "L", "r1", 0, 1000, noReply, faultcheck.Reply{}).
			attempt("h1", "L", "r1", 1050, 2050, noReply, faultcheck.Reply{}).
			attempt("h2", "L", "r2", 2100, 2110, held, heldBy("h1", 7)).
			attempt("h2", "L", "r3", 2200, 2210, held, heldBy("h1", 9)),
		orphans: 1, unkno: 1, attempts: []uint64{1, 2},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rep := check(t, tc.h, true)
			f := rep.Figures
			if f.Orphans != tc.orphans || f.RetriedOrphans != tc.retried || f.LateOrphans != tc.late ||
				f.LapsedOrphans != tc.lapsed || f.UnknownTenures != tc.unkno {
				t.Fatalf("orphans %d (%d retried, %d late, %d lapsed), unknown %d; want %d (%d, %d, %d), %d: %v",
					f.Orphans, f.RetriedOrphans, f.LateOrphans, f.LapsedOrphans, f.UnknownTenures,
					tc.orphans, tc.retried, tc.late, tc.lapsed, tc.unkno, rep.Orphans)
			}
			if len(rep.Orphans) != tc.orphans {
				t.Fatalf("report lists %v, want %d", rep.Orphans, tc.orphans)
			}
			if tc.orphans == 0 {
				return
			}
			o := rep.Orphans[0]
			var want []faultcheck.OpRef
			for _, s := range tc.attempts {
				want = append(want, faultcheck.OpRef{Proc: "h1", Seq: s})
			}
			if o.Retried() != (tc.retried > 0) || o.Late != (tc.late > 0) || o.Lapsed != (tc.lapsed > 0) || o.Answer != tc.answer || o.Holder != "h1" || !slices.Equal(o.Attempts, want) {
				t.Errorf("orphan %v: want h1's attempts %v, answer %q", o, want, tc.answer)
			}
		})
	}
}

func check(t *testing.T, b *hist, ignoreReads bool) *faultcheck.Report {
	t.Helper()
	h, err := b.history()
	if err != nil {
		t.Fatal(err)
	}
	p := faultcheck.DefaultParams()
	p.IgnoreReads = ignoreReads
	rep, err := faultcheck.Check(h, p)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}
