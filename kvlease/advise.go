package kvlease

import (
	"fmt"
	"math"
	"runtime/metrics"
	"strings"
	"time"
)

// Measurements feed [Advise]: p99 figures observed on the holder.
type Measurements struct {
	Work      time.Duration // a unit of work between two checks of the lease
	RenewRTT  time.Duration // a renewal's round trip
	Pause     time.Duration // a stop of the holder process (GC, swap, scheduling); see [GCPauseP99]
	ClockRate float64       // measured clock-rate error against the grantor (0: unknown)
}

// Advice is a lease configuration and the reasons for each figure.
type Advice struct {
	Duration      time.Duration // D
	RenewInterval time.Duration
	HolderMargin  time.Duration // m_h
	GrantorMargin time.Duration // m_g
	ClockRate     float64       // ρ
	Failover      time.Duration // worst time for the grantor to reclaim after a crash: ceil(D + m_g) + ~250 ms
	Reasons       []string
}

// Advise recommends D, the margins, ρ and the renewal interval from p99
// measurements (docs/advise.md; the arithmetic is docs/safety.md's):
//
//   - m_h covers the time from a check to its effect landing: one round trip
//     and one ordinary pause (longer pauses are the fence's job).
//   - The renewal interval must absorb a pause and two failed round trips
//     before the deadline: I ≥ pause + 2·rtt, and I = D/3 leaves two
//     attempts in the window.
//   - D = 3·I + m_h, at least 1 s, rounded up to whole seconds (the
//     server's TTL resolution). A work unit longer than the holder's window
//     is fine while the keeper renews; its effects each need a check.
//   - ρ: ten times the measured clock-rate error, at least 1e-4, default
//     1e-3 when unmeasured.
//   - m_g: 1 s, the default, covering a forward step of the server clock.
func Advise(m Measurements) Advice {
	a := Advice{GrantorMargin: DefaultGrantorMargin}
	a.HolderMargin = max(m.RenewRTT+m.Pause, 100*time.Millisecond)
	a.Reasons = append(a.Reasons, fmt.Sprintf("holder margin %v: a check's effect lands within a round trip (%v) and an ordinary pause (%v); longer pauses are what the fence is for",
		a.HolderMargin, m.RenewRTT, m.Pause))
	interval := max(m.Pause+2*m.RenewRTT, 300*time.Millisecond)
	a.ClockRate = DefaultClockRate
	// A clock slow against the grantor's is an error as large as one
	// that is fast by as much (-0.5 read as unmeasured; found by an
	// outside client).
	if rate := math.Abs(m.ClockRate); rate > 0 {
		a.ClockRate = max(10*rate, 1e-4)
		if 10*rate < 1e-4 {
			// It said "ten times the measured error" of the floor too.
			a.Reasons = append(a.Reasons, fmt.Sprintf("ρ %g: the floor; ten times the measured clock-rate error %g is less", a.ClockRate, m.ClockRate))
		} else {
			a.Reasons = append(a.Reasons, fmt.Sprintf("ρ %g: ten times the measured clock-rate error %g", a.ClockRate, m.ClockRate))
		}
	} else {
		a.Reasons = append(a.Reasons, fmt.Sprintf("ρ %g: the default, since the clock-rate error was not measured", a.ClockRate))
	}
	d := 3*interval + a.HolderMargin
	d = max(d, MinDuration)
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	// A large ρ takes its share of every window: a second more at a time
	// until the timing holds, if it can (it gave up at the first D, though
	// a longer one would do; found by an outside client).
	grown := 0
	for ; grown < maxGrowth; grown++ {
		if ValidateTiming(d, a.HolderMargin, DefaultRenewInterval(d).Truncate(time.Millisecond), a.ClockRate) == nil {
			break
		}
		d += time.Second
	}
	a.Duration = d
	// Whole milliseconds (rounded down: renewing a little early is safe).
	a.RenewInterval = DefaultRenewInterval(d).Truncate(time.Millisecond)
	need := fmt.Sprintf("a pause of %v plus two round trips of %v", m.Pause, m.RenewRTT)
	if m.Pause+2*m.RenewRTT < interval {
		need = fmt.Sprintf("the floor; %s is less", need)
	}
	grew := ""
	if grown > 0 {
		grew = fmt.Sprintf(", and %ds more for ρ %g", grown, a.ClockRate)
	}
	a.Reasons = append(a.Reasons, fmt.Sprintf("D %v: three renewal intervals of at least %v (%s) and the holder margin, rounded up to whole seconds%s",
		a.Duration, interval, need, grew))
	a.Reasons = append(a.Reasons, fmt.Sprintf("renew every %v (D/3): two attempts fit before the holder's deadline", a.RenewInterval))
	switch w := HolderValidity(d, a.ClockRate, a.HolderMargin).Truncate(time.Millisecond); {
	case m.Work <= 0: // not measured: nothing to say of it
	case m.Work > w:
		a.Reasons = append(a.Reasons, fmt.Sprintf("a work unit (%v) is longer than the holder's window (%v): keep the keeper renewing during it and check before each effect inside the unit, not once per unit", m.Work, w))
	default:
		a.Reasons = append(a.Reasons, fmt.Sprintf("a work unit (%v) fits in the holder's window (%v): Check before each effect", m.Work, w))
	}
	if d > DefaultMaxDuration {
		a.Reasons = append(a.Reasons, fmt.Sprintf("D %v is beyond the %v a grantor takes by default: raise its maximum (serve --max-ttl)", d, DefaultMaxDuration))
	}
	a.Failover = ServerTTL(d, a.GrantorMargin) + 250*time.Millisecond
	a.Reasons = append(a.Reasons, fmt.Sprintf("grantor margin %v: absorbs a forward step of the server's clock; after a crash the lease is free within %v", a.GrantorMargin, a.Failover))
	return a
}

// maxGrowth bounds the seconds Advise adds to D for a large clock-rate
// error.
const maxGrowth = 600

// Check reports whether leases can be kept as a advises: whether its
// timing passes [ValidateTiming]. Measurements beyond what a lease can
// absorb (a clock-rate error of 1% or more) give advice no lease takes:
// Advise gave it all the same, and a holder that followed it was refused
// (found by an outside client).
//
// Errors: [ErrInvalidTiming].
func (a Advice) Check() error {
	return ValidateTiming(a.Duration, a.HolderMargin, a.RenewInterval, a.ClockRate)
}

// String renders the advice as the lines `leased advise` prints.
func (a Advice) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "duration        %v\nrenew interval  %v\nholder margin   %v\ngrantor margin  %v\nclock rate      %g\nfailover        %v\n\nwhy:\n",
		a.Duration, a.RenewInterval, a.HolderMargin, a.GrantorMargin, a.ClockRate, a.Failover)
	for _, r := range a.Reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	return b.String()
}

// GCPauseP99 returns the 99th percentile of this process's stop-the-world
// GC pauses so far, from runtime/metrics (/sched/pauses/total/gc:seconds):
// the upper bound of the histogram bucket it falls in, so never an
// underestimate. It is a floor for [Measurements].Pause of a Go holder (the
// process can also stop for scheduling, swapping, or a SIGSTOP, which no
// runtime metric sees). ok is false before the first collection.
func GCPauseP99() (p99 time.Duration, ok bool) {
	s := []metrics.Sample{{Name: "/sched/pauses/total/gc:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return 0, false
	}
	secs, ok := histogramQuantile(s[0].Value.Float64Histogram(), 0.99)
	return time.Duration(secs * float64(time.Second)), ok
}

// histogramQuantile returns the upper bound of the bucket holding the q-th
// quantile of h, false if h is empty. The last bucket may be unbounded: its
// lower bound is returned then.
func histogramQuantile(h *metrics.Float64Histogram, q float64) (float64, bool) {
	var total uint64
	for _, n := range h.Counts {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(total)))
	var seen uint64
	for i, n := range h.Counts {
		if seen += n; seen >= rank && n > 0 {
			if hi := h.Buckets[i+1]; !math.IsInf(hi, 1) {
				return hi, true
			}
			return h.Buckets[i], true
		}
	}
	return h.Buckets[len(h.Buckets)-1], true
}
