package faultcheck

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// ErrViolation is what [Report.Err] wraps when the history broke a
// safety property.
var ErrViolation = errors.New("faultcheck: safety violation")

// Params are the holders' timing settings and the checker's own.
type Params struct {
	// Rho is ρ, the bound on clock-rate differences the holders assume
	// (kvlease.DefaultClockRate, 1e-3). In [0, 1).
	Rho float64
	// HolderMargin returns m_h for a duration D; nil is
	// [DefaultHolderMargin]. Give the holders' own setting.
	HolderMargin func(d time.Duration) time.Duration
	// GrantorMargin is m_g, the grantor's margin
	// (kvlease.DefaultGrantorMargin, 1 s): a tenure written with duration
	// D lapses [ServerTTL] after it was stored, and a correct grantor
	// renews it until [RenewalCutoff] after the write's send. At least 0.
	// Give the grantor's own setting.
	GrantorMargin time.Duration
	// Around is how long after a fault's end still counts as around it
	// for [Figures.AvailabilityAround]: the recovery (a TTL to lapse, an
	// election) belongs to the fault. At least 0.
	Around time.Duration
	// From and To bound the run for availability, in the history's
	// monotonic nanoseconds; 0 takes the first and the last instant the
	// history names.
	From, To int64
	// IgnoreReads leaves get replies and the token and revision named
	// by held and conflict errors out of the lost-acknowledgement check:
	// one that shows the lease older than an acknowledgement had left it
	// counts as [Figures.StaleReads] instead; only later compare-and-sets
	// (acknowledged renewals) count as [LostAck] then.
	// Those replies are reads, and kvlease's reads are hints: a direct
	// get may be served by a follower that is behind, and a grantor node
	// re-reads only below what it wrote or saw itself (docs/safety.md,
	// "Evidence, not truth"). Set it when such a read is no proof of loss.
	IgnoreReads bool
	// MaxLate bounds how long after its send a grant attempt that got no
	// answer may still be carried out (it waited in a paused or cut-off
	// node, in TCP's retransmissions, in a paused holder): an orphan
	// tenure is put down only to a request with an unanswered attempt
	// sent at most MaxLate before the tenure was surely stored. 0: no
	// bound. At least 0.
	MaxLate time.Duration
}

// DefaultParams returns the library's defaults: ρ = 1e-3, m_h =
// [DefaultHolderMargin], m_g = 1 s, 10 s around a fault (a 3 s lease's TTL of
// ceil(D + 1 s) plus an election and a restart), and attempts carried out
// up to 30 s late (more than the longest pause or partition of the fault
// suite and TCP's retransmissions after it).
func DefaultParams() Params {
	return Params{Rho: 1e-3, HolderMargin: DefaultHolderMargin, GrantorMargin: time.Second, Around: 10 * time.Second,
		MaxLate: 30 * time.Second}
}

// Validate checks the values and how they relate; errors wrap
// [ErrInvalidParams].
func (p Params) Validate() error {
	switch {
	case math.IsNaN(p.Rho) || p.Rho < 0 || p.Rho >= 1:
		return fmt.Errorf("%w: rho %v outside [0, 1)", ErrInvalidParams, p.Rho)
	case p.Around < 0:
		return fmt.Errorf("%w: around %v is negative", ErrInvalidParams, p.Around)
	case p.GrantorMargin < 0:
		return fmt.Errorf("%w: grantor margin %v is negative", ErrInvalidParams, p.GrantorMargin)
	case p.MaxLate < 0:
		return fmt.Errorf("%w: max late %v is negative", ErrInvalidParams, p.MaxLate)
	case p.From < 0 || p.To < 0 || (p.To != 0 && p.To <= p.From):
		return fmt.Errorf("%w: run bounds [%d, %d]", ErrInvalidParams, p.From, p.To)
	}
	return nil
}

// ViolationKind names a safety property.
type ViolationKind string

const (
	// Overlap: two tenures of one lease had holding windows that
	// intersect: one's grant (or renewal) reply arrived before the
	// other's window end.
	Overlap ViolationKind = "overlap"
	// StaleAccepted: a renewal or release naming an older tenure was
	// accepted although it was sent after a newer tenure's grant reply
	// had arrived.
	StaleAccepted ViolationKind = "stale_tenure_accepted"
	// TokenNotIncreasing: a grant's token is not above a token or
	// revision acknowledged before the grant was sent.
	TokenNotIncreasing ViolationKind = "token_not_increasing"
	// TokenReused: two acknowledged grants carry the same token.
	TokenReused ViolationKind = "token_reused"
	// LostAck: a reply sent after an acknowledgement shows the lease at
	// an older tenure, or its tenure at an older revision, than was
	// acknowledged: the cluster lost the acknowledged write.
	LostAck ViolationKind = "lost_ack"
)

// OpRef names an operation of the history.
type OpRef struct {
	Proc string
	Seq  uint64
}

func (r OpRef) String() string { return fmt.Sprintf("%s#%d", r.Proc, r.Seq) }

func refOf(r *Record) OpRef { return OpRef{r.Proc, r.Seq} }

// Violation is one broken property, with the operations that show it.
type Violation struct {
	Kind   ViolationKind
	Lease  string
	Ops    []OpRef
	Detail string
}

func (v Violation) String() string {
	refs := make([]string, len(v.Ops))
	for i, r := range v.Ops {
		refs[i] = r.String()
	}
	return fmt.Sprintf("%s %q [%s]: %s", v.Kind, v.Lease, strings.Join(refs, " "), v.Detail)
}

// HandoverCause is why a tenure ended before the next one began.
type HandoverCause string

const (
	// AfterRelease: the holder sent a release; measured from its send.
	AfterRelease HandoverCause = "release"
	// AfterCrash: a kill_holder fault hit the holder's process during
	// the tenure; measured from the fault's start.
	AfterCrash HandoverCause = "crash"
	// AfterPause: a stop_holder fault hit it; from the fault's start.
	AfterPause HandoverCause = "pause"
	// AfterAbandon: anything else (the holder stopped renewing, or was
	// refused); measured from the end of its last window.
	AfterAbandon HandoverCause = "abandon"
)

// Durations summarizes a set of durations.
type Durations struct {
	N                int
	Min, Median, Max time.Duration
}

func summarize(ds []time.Duration) Durations {
	if len(ds) == 0 {
		return Durations{}
	}
	slices.Sort(ds)
	return Durations{N: len(ds), Min: ds[0], Median: ds[len(ds)/2], Max: ds[len(ds)-1]}
}

// Figures describe a run; none of them is a failure by itself, though
// FalseLosses must be 0 for a sound grantor.
type Figures struct {
	Tenures         int // acknowledged grants
	Renewals        int // acknowledged renewals
	RenewalsRefused int // renewals answered not_holder or expired
	Releases        int // acknowledged releases
	FaultsByKind    map[FaultKind]int
	// Availability is the share of the run during which a lease had a
	// live holder window, over all leases; AvailabilityByLease per lease.
	Availability        float64
	AvailabilityByLease map[string]float64
	// AvailabilityAround is the same share over the time from each
	// fault's start to its end plus [Params.Around], by fault kind.
	AvailabilityAround map[FaultKind]float64
	// Handover is the time from the end of a tenure to the next grant's
	// reply, by why the tenure ended.
	Handover map[HandoverCause]Durations
	// FalseLosses are renewals refused (not_holder, expired) although
	// sent inside their tenure's live window, before any release or
	// refusal of it, and answered before the grantor could have given the
	// tenure up ([RenewalCutoff] after the send of its last
	// acknowledged write): a renewal that waited in a cut-off node past
	// that point is rightly refused, the tenure having lapsed meanwhile.
	FalseLosses int
	// Orphans are tenures granted whose reply reached no waiting caller:
	// a token that no acknowledged grant carries shows up in a reply,
	// and a grant attempt on that lease, sent before, got no answer.
	// Each is put down to one grant request ([Report.Orphans]).
	Orphans int
	// RetriedOrphans are the Orphans whose request the caller sent again
	// and stopped on an answer to (its last attempt got any reply of the
	// service but unavailable or internal): with idempotent grants its
	// retry is answered with the tenure, which is then no orphan, and a
	// refusal while an attempt can still be carried out is waited out. The
	// rest, Orphans − RetriedOrphans, are of callers that gave up without
	// an answer to their last attempt (its time ran out while an attempt
	// was unanswered, which may still be carried out). Attempts share a
	// request by their request id ([Request].RequestID); one without is a
	// request of its own, never retried. An orphan that a request of a
	// caller that gave up could explain is put down to that one: these
	// are the orphans only a retried request explains.
	RetriedOrphans int
	// LateOrphans are the RetriedOrphans surely stored after the retry's
	// answer reached the caller: an earlier attempt was carried out late,
	// after the caller had been told the lease was held and had gone
	// (idempotent grants make a retry find an earlier attempt's tenure,
	// not stop an earlier attempt that has yet to arrive).
	LateOrphans int
	// LapsedOrphans are the RetriedOrphans, not late, whose answer came
	// when the tenure may have lapsed: at least its [ServerTTL] after it
	// could first have been stored (its request's first send, or a lower
	// revision's acknowledged write if later), and neither that answer
	// (held by the tenure itself, which the retry should have been
	// answered with) nor a reply to an operation sent after it shows the
	// tenure still held. The
	// answer (request_used: "your tenure has ended"; held by a later
	// holder) may be true: the caller's retries reached the grantor only
	// after its tenure's time, which no grantor can give back.
	LapsedOrphans int
	// UnknownTenures are such tokens with no unanswered attempt to
	// explain them: the lease was taken by nobody known.
	UnknownTenures int
	// StaleReads are reads that showed the lease older than an
	// acknowledgement before them had left it: counted here, not
	// reported as [LostAck], with [Params.IgnoreReads].
	StaleReads int
}

// Report is what [Check] found.
type Report struct {
	Violations []Violation
	Figures    Figures
	// StaleReads are the reads [Figures.StaleReads] counts, described as
	// the lost acknowledgements they would be without [Params.IgnoreReads].
	StaleReads []Violation
	// Orphans are the orphan tenures [Figures.Orphans] counts, each with
	// the request it is put down to.
	Orphans []Orphan
}

// Orphan is an orphan tenure and the grant request the checker puts it
// down to.
type Orphan struct {
	Lease string
	Token uint64
	// Shown is the operation whose reply showed the token first.
	Shown OpRef
	// Holder is who sent the request; RequestID its request id, if any.
	Holder, RequestID string
	// Attempts are the request's attempts, by send.
	Attempts []OpRef
	// Answer is the code of the attempt the service answered, if the
	// caller retried and got one (see [Figures.RetriedOrphans]); "" if it
	// gave up before any answer.
	Answer string
	// Late: the tenure was surely stored after that answer arrived
	// ([Figures.LateOrphans]).
	Late bool
	// Lapsed: that answer came when the tenure may have lapsed
	// ([Figures.LapsedOrphans]).
	Lapsed bool
}

// Retried reports whether the caller retried the request and got an
// answer: an orphan idempotent grants are meant to prevent (see
// [Figures.LateOrphans] for those they cannot).
func (o Orphan) Retried() bool { return o.Answer != "" }

func (o Orphan) String() string {
	refs := make([]string, len(o.Attempts))
	for i, r := range o.Attempts {
		refs[i] = r.String()
	}
	what := "gave up without an answer"
	if o.Retried() {
		what = "retried and answered " + o.Answer
	}
	if o.Late {
		what += ", then stored"
	}
	if o.Lapsed {
		what += " when it may have lapsed"
	}
	return fmt.Sprintf("%q token %d, shown by %s: request %q of %s [%s], %s",
		o.Lease, o.Token, o.Shown, cmp.Or(o.RequestID, "(no id)"), o.Holder, strings.Join(refs, " "), what)
}

// Err returns nil for a history without violations, else an error
// wrapping [ErrViolation] that lists them.
func (r *Report) Err() error {
	if len(r.Violations) == 0 {
		return nil
	}
	lines := make([]string, len(r.Violations))
	for i, v := range r.Violations {
		lines[i] = v.String()
	}
	return fmt.Errorf("%w: %d found:\n%s", ErrViolation, len(r.Violations), strings.Join(lines, "\n"))
}

// tenure is one acknowledged grant and what followed it.
type tenure struct {
	grant    *Record
	acks     []*Record // the grant and the acknowledged renewals, by send
	refusals []*Record // renewals answered not_holder or expired
	releases []*Record // release attempts, answered or not
	held     []span    // merged holding windows, clipped at stop
	stop     int64     // first release send or refusal reply; 0 if none
	end      int64     // end of the last window (or the grant's reply)
}

func (t *tenure) token() uint64 { return t.grant.Reply.Token }

// firstRelease returns the release sent first, or nil.
func (t *tenure) firstRelease() *Record {
	var first *Record
	for _, r := range t.releases {
		if first == nil || r.TSend < first.TSend {
			first = r
		}
	}
	return first
}

// Check runs every check over h and computes the figures. Only
// [ErrInvalidParams] is an error; violations are in the report.
//
// The checks, with s the send and r the reply time of an operation, all
// on one machine's monotonic clock:
//
//   - A holder holds from the reply r of each acknowledged grant or
//     renewal until s + D·(1−ρ) − m_h (docs/safety.md), and not after it
//     sent a release or got a refusal. Two tenures of a lease whose
//     holding windows intersect are an [Overlap].
//   - An acknowledged renewal or release of token t sent after the reply
//     of a grant of the same lease with a token above t is
//     [StaleAccepted]: the grant certainly happened first.
//   - Tokens are revisions, one counter per bucket (a history is one
//     bucket). An acknowledged grant G is [TokenNotIncreasing] if its
//     token is at or below a token or revision of any acknowledged grant
//     or renewal whose reply arrived before G was sent. Operations that
//     overlap in time are not ordered, and nothing is required of them.
//   - Two acknowledged grants with one token are [TokenReused].
//   - Every acknowledgement (grant: its token; renewal: its tenure's
//     token and new revision) is a floor for what any operation on the
//     lease sent after its reply may see: an acknowledged renewal's new
//     revision, and (unless [Params.IgnoreReads]) a get's token and
//     revision, a held error's token and a conflict's revision. One that
//     shows a lower token, or the same token at a lower revision, is
//     [LostAck].
func Check(h *History, p Params) (*Report, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if p.HolderMargin == nil {
		p.HolderMargin = DefaultHolderMargin
	}
	c := &checker{p: p, rep: &Report{}}
	c.build(h)
	c.overlaps()
	c.staleAccepted()
	c.tokenOrder()
	c.tokenReuse()
	c.lostAcks()
	c.figures(h)
	slices.SortStableFunc(c.rep.Violations, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Lease, b.Lease))
	})
	return c.rep, nil
}

type checker struct {
	p       Params
	rep     *Report
	ops     []*Record // by send
	leases  []string
	tenures map[string][]*tenure // by lease, by grant reply
	grants  []*Record            // acknowledged grants, by send
	// firstSend is the send of each grant request's first attempt, by
	// requestKey: what a recovered grant's window counts from.
	firstSend map[requestKey]int64
}

// requestKey names one grant request: its attempts share the process,
// the holder, the lease and the request id.
type requestKey struct{ proc, holder, lease, rid string }

func keyOf(o *Record) requestKey { return requestKey{o.Proc, o.Holder, o.Lease, o.Req.RequestID} }

// sent is when the holder counts an acknowledgement's window from: its
// send, but for a recovered grant the send of its request's first
// attempt, as kvlease.Acquire does. The tenure may have been stored by
// any attempt, so the grantor's TTL counts from after that first send
// only, and a window counted from the recovered attempt's own send could
// outlast it. (An answer that is not recovered was stored by its own
// attempt, whose send the grantor's TTL follows: the window from it is a
// stricter test of the grantor than the holder's own, which also counts
// from the first attempt.)
func (c *checker) sent(o *Record) int64 {
	if o.Op == OpGrant && o.Reply.Recovered && o.Req.RequestID != "" {
		if s, ok := c.firstSend[keyOf(o)]; ok {
			return min(s, o.TSend)
		}
	}
	return o.TSend
}

func (c *checker) violate(k ViolationKind, lease, detail string, ops ...*Record) {
	v := Violation{Kind: k, Lease: lease, Detail: detail}
	for _, o := range ops {
		v.Ops = append(v.Ops, refOf(o))
	}
	c.rep.Violations = append(c.rep.Violations, v)
}

func (c *checker) window(s int64, d time.Duration) int64 {
	return s + int64(Window(d, c.p.Rho, c.p.HolderMargin(d)))
}

func (c *checker) build(h *History) {
	for i := range h.Ops {
		c.ops = append(c.ops, &h.Ops[i])
	}
	slices.SortStableFunc(c.ops, func(a, b *Record) int { return cmp.Compare(a.TSend, b.TSend) })
	c.tenures = map[string][]*tenure{}
	c.firstSend = map[requestKey]int64{}
	byToken := map[string]map[uint64][]*tenure{}
	seen := map[string]bool{}
	for _, o := range c.ops {
		if !seen[o.Lease] {
			seen[o.Lease] = true
			c.leases = append(c.leases, o.Lease)
		}
		if k := keyOf(o); o.Op == OpGrant && k.rid != "" {
			if _, ok := c.firstSend[k]; !ok { // ops are by send: the first is the earliest
				c.firstSend[k] = o.TSend
			}
		}
		if o.Op != OpGrant || o.Code != CodeOK {
			continue
		}
		c.grants = append(c.grants, o)
		t := &tenure{grant: o, acks: []*Record{o}}
		c.tenures[o.Lease] = append(c.tenures[o.Lease], t)
		if byToken[o.Lease] == nil {
			byToken[o.Lease] = map[uint64][]*tenure{}
		}
		byToken[o.Lease][o.Reply.Token] = append(byToken[o.Lease][o.Reply.Token], t)
	}
	slices.Sort(c.leases)
	find := func(o *Record) *tenure {
		ts := byToken[o.Lease][o.Req.Token]
		for _, t := range ts {
			if t.grant.Holder == o.Holder {
				return t
			}
		}
		if len(ts) > 0 {
			return ts[0]
		}
		return nil
	}
	for _, o := range c.ops {
		if o.Op != OpRenew && o.Op != OpRelease {
			continue
		}
		t := find(o)
		if t == nil {
			continue
		}
		switch {
		case o.Op == OpRelease:
			t.releases = append(t.releases, o)
		case o.Code == CodeOK:
			t.acks = append(t.acks, o)
		case o.Code == CodeNotHolder || o.Code == CodeExpired:
			t.refusals = append(t.refusals, o)
		}
	}
	for _, ts := range c.tenures {
		for _, t := range ts {
			c.holdings(t)
		}
		slices.SortStableFunc(ts, func(a, b *tenure) int { return cmp.Compare(a.grant.TReply, b.grant.TReply) })
	}
}

// holdings computes a tenure's holding windows: from each
// acknowledgement's reply to its send ([checker.sent]) + Window, clipped
// at the first release sent or refusal received.
func (c *checker) holdings(t *tenure) {
	if r := t.firstRelease(); r != nil {
		t.stop = r.TSend
	}
	for _, r := range t.refusals {
		if t.stop == 0 || r.TReply < t.stop {
			t.stop = r.TReply
		}
	}
	d := time.Duration(t.grant.Req.D)
	var ss []span
	for _, a := range t.acks {
		if a.Req.D > 0 {
			d = time.Duration(a.Req.D)
		}
		s := span{a.TReply, c.window(c.sent(a), d)}
		if t.stop != 0 {
			s.to = min(s.to, t.stop)
		}
		ss = append(ss, s)
	}
	t.held = union(ss)
	t.end = t.grant.TReply
	if n := len(t.held); n > 0 {
		t.end = t.held[n-1].to
	}
}

func (c *checker) overlaps() {
	type item struct {
		s span
		t *tenure
	}
	for _, lease := range c.leases {
		var items []item
		for _, t := range c.tenures[lease] {
			for _, s := range t.held {
				items = append(items, item{s, t})
			}
		}
		slices.SortStableFunc(items, func(a, b item) int { return cmp.Compare(a.s.from, b.s.from) })
		type pair struct{ a, b *tenure }
		reported := map[pair]bool{}
		var active []item
		for _, it := range items {
			active = slices.DeleteFunc(active, func(a item) bool { return a.s.to <= it.s.from })
			for _, a := range active {
				if a.t == it.t || reported[pair{a.t, it.t}] || reported[pair{it.t, a.t}] {
					continue
				}
				reported[pair{a.t, it.t}] = true
				c.violate(Overlap, lease, fmt.Sprintf("token %d (%s) holds until %d; token %d (%s) holds from %d, %v before",
					a.t.token(), a.t.grant.Holder, a.s.to, it.t.token(), it.t.grant.Holder, it.s.from,
					time.Duration(a.s.to-it.s.from)), a.t.grant, it.t.grant)
			}
			active = append(active, it)
		}
	}
}

// floor holds records by reply time, with the running maximum of a key
// and the record that holds it.
type floor struct {
	at   []int64
	max  []uint64
	from []*Record
}

func newFloor(recs []*Record, key func(*Record) uint64) *floor {
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b *Record) int { return cmp.Compare(a.TReply, b.TReply) })
	f := &floor{}
	for _, r := range recs {
		m, from := key(r), r
		if n := len(f.max); n > 0 && f.max[n-1] >= m {
			m, from = f.max[n-1], f.from[n-1]
		}
		f.at, f.max, f.from = append(f.at, r.TReply), append(f.max, m), append(f.from, from)
	}
	return f
}

// before returns the highest key among records replied strictly before t.
func (f *floor) before(t int64) (uint64, *Record) {
	i := sort.Search(len(f.at), func(i int) bool { return f.at[i] >= t })
	if i == 0 {
		return 0, nil
	}
	return f.max[i-1], f.from[i-1]
}

func (c *checker) staleAccepted() {
	for _, lease := range c.leases {
		var grants []*Record
		for _, t := range c.tenures[lease] {
			grants = append(grants, t.grant)
		}
		f := newFloor(grants, func(r *Record) uint64 { return r.Reply.Token })
		for _, o := range c.ops {
			if o.Lease != lease || (o.Op != OpRenew && o.Op != OpRelease) || o.Code != CodeOK {
				continue
			}
			if top, g := f.before(o.TSend); top > o.Req.Token {
				c.violate(StaleAccepted, lease, fmt.Sprintf("%s of token %d accepted, sent %v after token %d was granted",
					o.Op, o.Req.Token, time.Duration(o.TSend-g.TReply), top), g, o)
			}
		}
	}
}

// ackFloor is the floor of every token and revision acknowledged (by a
// grant or a renewal), over the whole bucket.
func (c *checker) ackFloor() *floor {
	var acked []*Record
	for _, o := range c.ops {
		if o.Code == CodeOK && (o.Op == OpGrant || o.Op == OpRenew) {
			acked = append(acked, o)
		}
	}
	return newFloor(acked, func(r *Record) uint64 { return max(r.Reply.Token, r.Reply.Revision) })
}

// tokenOrder checks each grant against what was acknowledged before it
// was sent; a recovered grant was sent when its request's first attempt
// was (any attempt may have stored it).
func (c *checker) tokenOrder() {
	f := c.ackFloor()
	for _, g := range c.grants {
		if top, from := f.before(c.sent(g)); top >= g.Reply.Token {
			c.violate(TokenNotIncreasing, g.Lease, fmt.Sprintf("token %d granted after %s on %q acknowledged %d",
				g.Reply.Token, from.Op, from.Lease, top), from, g)
		}
	}
}

func (c *checker) tokenReuse() {
	by := map[uint64][]*Record{}
	var order []uint64
	for _, g := range c.grants {
		if by[g.Reply.Token] == nil {
			order = append(order, g.Reply.Token)
		}
		by[g.Reply.Token] = append(by[g.Reply.Token], g)
	}
	for _, tok := range order {
		if gs := by[tok]; len(gs) > 1 {
			var who []string
			for _, g := range gs {
				who = append(who, fmt.Sprintf("%s on %q", g.Holder, g.Lease))
			}
			c.violate(TokenReused, gs[0].Lease, fmt.Sprintf("token %d granted %d times: %s", tok, len(gs), strings.Join(who, ", ")), gs...)
		}
	}
}

// seen is what a reply shows of a lease: a token and, if not 0, the
// tenure's revision.
type seen struct {
	token, revision uint64
}

// shows returns what o shows of the lease, if anything, and whether that
// is a read (a get, the token of a held error, the revision of a
// conflict) rather than an acknowledged compare-and-set.
func shows(o *Record) (sh seen, read, ok bool) {
	switch {
	case o.Op == OpRenew && o.Code == CodeOK:
		return seen{o.Req.Token, o.Reply.Revision}, false, true
	case o.Op == OpGet && o.Code == CodeOK:
		return seen{o.Reply.Token, o.Reply.Revision}, true, o.Reply.Token != 0
	case o.Code == CodeHeld:
		return seen{o.Reply.Token, 0}, true, o.Reply.Token != 0
	case o.Code == CodeConflict && (o.Op == OpRenew || o.Op == OpRelease):
		return seen{o.Req.Token, o.Reply.Revision}, true, o.Reply.Revision != 0
	}
	return seen{}, false, false
}

func (c *checker) lostAcks() {
	for _, lease := range c.leases {
		type ack struct {
			seen
			r *Record
		}
		var acks []ack
		for _, t := range c.tenures[lease] {
			for _, a := range t.acks {
				rev := a.Reply.Revision
				if a.Op == OpGrant {
					rev = max(rev, a.Reply.Token)
				}
				acks = append(acks, ack{seen{t.token(), rev}, a})
			}
		}
		slices.SortStableFunc(acks, func(a, b ack) int { return cmp.Compare(a.r.TReply, b.r.TReply) })
		var top ack              // highest token acknowledged so far
		revs := map[uint64]ack{} // highest revision acknowledged per token
		next := 0
		for _, o := range c.ops {
			if o.Lease != lease {
				continue
			}
			for ; next < len(acks) && acks[next].r.TReply < o.TSend; next++ {
				a := acks[next]
				if a.token > top.token {
					top = a
				}
				if a.revision > revs[a.token].revision {
					revs[a.token] = a
				}
			}
			sh, read, ok := shows(o)
			if !ok {
				continue
			}
			behind := sh.token < top.token || sh.revision != 0 && sh.revision < revs[sh.token].revision
			switch {
			case behind && read && c.p.IgnoreReads:
				c.rep.Figures.StaleReads++
				c.rep.StaleReads = append(c.rep.StaleReads, Violation{Kind: LostAck, Lease: lease,
					Ops: []OpRef{refOf(top.r), refOf(o)}, Detail: fmt.Sprintf("%s (%s) shows token %d at revision %d after token %d at revision %d was acknowledged",
						o.Op, o.Code, sh.token, sh.revision, top.token, top.revision)})
			case sh.token < top.token:
				c.violate(LostAck, lease, fmt.Sprintf("%s (%s) shows token %d after token %d was acknowledged",
					o.Op, o.Code, sh.token, top.token), top.r, o)
			case sh.revision != 0 && sh.revision < revs[sh.token].revision:
				c.violate(LostAck, lease, fmt.Sprintf("%s (%s) shows token %d at revision %d after revision %d was acknowledged",
					o.Op, o.Code, sh.token, sh.revision, revs[sh.token].revision), revs[sh.token].r, o)
			}
		}
	}
}

func (c *checker) figures(h *History) {
	f := &c.rep.Figures
	f.FaultsByKind = map[FaultKind]int{}
	f.AvailabilityByLease = map[string]float64{}
	f.AvailabilityAround = map[FaultKind]float64{}
	f.Handover = map[HandoverCause]Durations{}

	from, to := c.p.From, c.p.To
	if from == 0 || to == 0 {
		lo, hi := int64(math.MaxInt64), int64(0)
		for _, o := range c.ops {
			lo, hi = min(lo, o.TSend), max(hi, o.TSend, o.TReply)
		}
		for _, fl := range h.Faults {
			lo, hi = min(lo, fl.TStart), max(hi, fl.TStart, fl.TEnd)
		}
		if from == 0 {
			from = lo
		}
		if to == 0 {
			to = hi
		}
	}
	run := []span{{from, to}}

	for _, o := range c.ops {
		switch {
		case o.Op == OpRenew && o.Code == CodeOK:
			f.Renewals++
		case o.Op == OpRenew && (o.Code == CodeNotHolder || o.Code == CodeExpired):
			f.RenewalsRefused++
		case o.Op == OpRelease && o.Code == CodeOK:
			f.Releases++
		}
	}
	f.Tenures = len(c.grants)

	hold := map[string][]span{}
	var total int64
	for _, lease := range c.leases {
		var ss []span
		for _, t := range c.tenures[lease] {
			ss = append(ss, t.held...)
		}
		hold[lease] = intersect(union(ss), run)
		m := measure(hold[lease])
		total += m
		if to > from {
			f.AvailabilityByLease[lease] = float64(m) / float64(to-from)
		}
	}
	if n := len(c.leases); n > 0 && to > from {
		f.Availability = float64(total) / float64(int64(n)*(to-from))
	}

	byKind := map[FaultKind][]span{}
	for _, fl := range h.Faults {
		f.FaultsByKind[fl.Fault]++
		end := fl.TEnd
		if end == 0 {
			end = to
		}
		byKind[fl.Fault] = append(byKind[fl.Fault], span{fl.TStart, end + int64(c.p.Around)})
	}
	for kind, ss := range byKind {
		around := intersect(union(ss), run)
		m := measure(around)
		if m == 0 || len(c.leases) == 0 {
			continue
		}
		var in int64
		for _, lease := range c.leases {
			in += measure(intersect(hold[lease], around))
		}
		f.AvailabilityAround[kind] = float64(in) / float64(int64(len(c.leases))*m)
	}

	c.handovers(h, f)
	c.falseLosses(f)
	c.orphans(f)
}

func (c *checker) handovers(h *History, f *Figures) {
	hit := func(kind FaultKind, t *tenure, until int64) (int64, bool) {
		for _, fl := range h.Faults {
			if fl.Fault == kind && fl.Target == t.grant.Proc && fl.TStart >= t.grant.TReply && fl.TStart <= until {
				return fl.TStart, true
			}
		}
		return 0, false
	}
	ds := map[HandoverCause][]time.Duration{}
	for _, lease := range c.leases {
		ts := c.tenures[lease]
		for i := 1; i < len(ts); i++ {
			a, b := ts[i-1], ts[i]
			cause, since := AfterAbandon, a.end
			// A release ends a tenure only if sent while it held; one
			// sent later (a holder that was paused, say) found it over.
			if first := a.firstRelease(); first != nil && first.TSend <= a.end {
				cause, since = AfterRelease, first.TSend
			} else if at, ok := hit(FaultKillHolder, a, b.grant.TReply); ok {
				cause, since = AfterCrash, at
			} else if at, ok := hit(FaultStopHolder, a, b.grant.TReply); ok {
				cause, since = AfterPause, at
			}
			ds[cause] = append(ds[cause], time.Duration(b.grant.TReply-since))
		}
	}
	for cause, d := range ds {
		f.Handover[cause] = summarize(d)
	}
}

// falseLosses counts refusals of renewals sent inside the window the
// acknowledgements before them had opened and answered before the renewal
// cutoff of the last of them, with no release sent and no refusal received
// before.
func (c *checker) falseLosses(f *Figures) {
	for _, ts := range c.tenures {
		for _, t := range ts {
			for _, r := range t.refusals {
				var live, kept int64
				d := time.Duration(t.grant.Req.D)
				for _, a := range t.acks {
					if a.Req.D > 0 {
						d = time.Duration(a.Req.D)
					}
					if a.TReply < r.TSend {
						live = max(live, c.window(c.sent(a), d))
						kept = max(kept, c.sent(a)+int64(RenewalCutoff(d, c.p.GrantorMargin)))
					}
				}
				ended := slices.ContainsFunc(t.releases, func(x *Record) bool { return x.TSend < r.TSend }) ||
					slices.ContainsFunc(t.refusals, func(x *Record) bool { return x != r && x.TReply < r.TSend })
				if r.TSend < live && r.TReply < kept && !ended {
					f.FalseLosses++
				}
			}
		}
	}
}

// grantRequest is one grant request: its attempts, which share a
// request id (an attempt without one is a request of its own).
type grantRequest struct {
	attempts []*Record // by send
	answer   *Record   // the first attempt the service answered, if any
}

// unanswered reports whether a grant attempt got no answer that shows
// what became of it: it may have been carried out.
func unanswered(a *Record) bool {
	return !a.replied() || a.Code == CodeUnavailable || a.Code == CodeInternal
}

// storedAfter returns, for a token, a time it was surely stored after
// (0 if none is known): the latest send of an acknowledgement of a lower
// revision, which was stored after that send (a recovered grant's after
// its request's first attempt's) and, revisions only growing, before the
// token.
func (c *checker) storedAfter() func(tok uint64) int64 {
	type at struct {
		rev  uint64
		sent int64
	}
	var acks []at
	for _, o := range c.ops {
		if o.Code == CodeOK && (o.Op == OpGrant || o.Op == OpRenew) {
			acks = append(acks, at{max(o.Reply.Token, o.Reply.Revision), c.sent(o)})
		}
	}
	slices.SortFunc(acks, func(a, b at) int { return cmp.Compare(a.rev, b.rev) })
	for i := 1; i < len(acks); i++ {
		acks[i].sent = max(acks[i].sent, acks[i-1].sent)
	}
	return func(tok uint64) int64 {
		i := sort.Search(len(acks), func(i int) bool { return acks[i].rev >= tok })
		if i == 0 {
			return 0
		}
		return acks[i-1].sent
	}
}

// orphans looks for tokens that replies show but no acknowledged grant
// carries, and puts each down to a grant request with an unanswered
// attempt if it can: one on that lease, with an attempt sent before the
// reply that showed the token and at most [Params.MaxLate] before the
// token was surely stored, whose first attempt was sent before anything
// at or above the token was acknowledged (the bucket's revisions only
// grow), and that no other orphan was put down to (a request makes one
// tenure at most). Of those it prefers the requests of the holder the
// reply names; then those of callers that gave up, so that an orphan
// counts as retried only if nothing else explains it; then the one with
// the latest such attempt. Attempts that share a request id are one
// request, so the attribution is exact where the history has request
// ids: the orphan is the request's, and the request counts as retried if
// its last attempt was answered (the caller stopped on an answer, not on
// the end of its time).
func (c *checker) orphans(f *Figures) {
	known := map[string]map[uint64]bool{}
	for _, g := range c.grants {
		if known[g.Lease] == nil {
			known[g.Lease] = map[uint64]bool{}
		}
		known[g.Lease][g.Reply.Token] = true
	}
	byLease := map[string][]*grantRequest{}
	byKey := map[requestKey]*grantRequest{}
	for _, a := range c.ops {
		if a.Op != OpGrant {
			continue
		}
		k := keyOf(a)
		r := byKey[k]
		if r == nil || k.rid == "" {
			r = &grantRequest{}
			byLease[a.Lease] = append(byLease[a.Lease], r)
			if k.rid != "" {
				byKey[k] = r
			}
		}
		r.attempts = append(r.attempts, a)
		r.answer = nil // the last attempt decides
		if !unanswered(a) {
			r.answer = a
		}
	}
	acked, after := c.ackFloor(), c.storedAfter()
	used := map[*grantRequest]bool{}
	counted := map[string]map[uint64]bool{}
	for _, o := range c.ops {
		var tok uint64
		switch {
		case o.Op == OpGet && o.Code == CodeOK, o.Code == CodeHeld:
			tok = o.Reply.Token
		}
		if tok == 0 || known[o.Lease][tok] || counted[o.Lease][tok] {
			continue
		}
		if counted[o.Lease] == nil {
			counted[o.Lease] = map[uint64]bool{}
		}
		counted[o.Lease][tok] = true
		stored := after(tok)
		var oldest int64 // the earliest send of an attempt that can have stored tok
		if c.p.MaxLate > 0 {
			oldest = stored - int64(c.p.MaxLate)
		}
		type rank struct {
			other, retried bool  // not of the holder o names; answered
			last           int64 // the send of its latest unanswered attempt that fits
		}
		better := func(a, b rank) bool {
			if a.other != b.other {
				return !a.other
			}
			if a.retried != b.retried {
				return !a.retried
			}
			return a.last > b.last
		}
		var cand *grantRequest
		var best rank
		for _, r := range byLease[o.Lease] {
			if used[r] {
				continue
			}
			first := r.attempts[0]
			if first.TSend >= o.TReply {
				continue
			}
			if top, _ := acked.before(first.TSend); top >= tok {
				continue
			}
			var last int64
			for _, a := range r.attempts {
				if a.TSend < o.TReply && a.TSend >= oldest && unanswered(a) {
					last = a.TSend
				}
			}
			if last == 0 {
				continue
			}
			rk := rank{other: o.Reply.Holder != first.Holder, retried: r.answer != nil, last: last}
			if cand == nil || better(rk, best) {
				cand, best = r, rk
			}
		}
		if cand == nil {
			f.UnknownTenures++
			continue
		}
		used[cand] = true
		f.Orphans++
		first := cand.attempts[0]
		orphan := Orphan{Lease: o.Lease, Token: tok, Shown: refOf(o), Holder: first.Holder, RequestID: first.Req.RequestID}
		for _, a := range cand.attempts {
			orphan.Attempts = append(orphan.Attempts, refOf(a))
		}
		if a := cand.answer; a != nil {
			orphan.Answer = a.Code
			orphan.Late = a.TReply <= stored
			orphan.Lapsed = !orphan.Late && c.mayHaveLapsed(o.Lease, tok, max(stored, first.TSend), time.Duration(first.Req.D), a)
			f.RetriedOrphans++
			switch {
			case orphan.Late:
				f.LateOrphans++
			case orphan.Lapsed:
				f.LapsedOrphans++
			}
		}
		c.rep.Orphans = append(c.rep.Orphans, orphan)
	}
}

// mayHaveLapsed reports whether the tenure tok on lease, stored no earlier
// than from with duration d, may have lapsed by the time of answer, the
// last answer to the request that made it: the server TTL had passed
// since from, and neither that answer (held by tok itself: the grantor
// saw the tenure live, and a retry of the request that made it is
// answered with it) nor a reply to an operation sent after it shows tok
// held.
func (c *checker) mayHaveLapsed(lease string, tok uint64, from int64, d time.Duration, answer *Record) bool {
	at := answer.TReply
	if at < from+int64(ServerTTL(d, c.p.GrantorMargin)) {
		return false
	}
	return !slices.ContainsFunc(c.ops, func(o *Record) bool {
		return o.Lease == lease && (o == answer || o.TSend > at) && o.Reply.Token == tok &&
			(o.Code == CodeHeld || o.Op == OpGet && o.Code == CodeOK)
	})
}
