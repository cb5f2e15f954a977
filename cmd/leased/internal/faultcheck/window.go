package faultcheck

import (
	"cmp"
	"slices"
	"time"
)

// Window is the time a holder may act after an acknowledged grant or
// renewal sent with duration d: D·(1−ρ) − m_h, counted from the send
// (docs/safety.md, "Two clocks, asymmetric risk"). It is the same
// arithmetic as kvlease.HolderValidity, which this package does not import
// (it links NATS); a test holds the two equal.
func Window(d time.Duration, rho float64, margin time.Duration) time.Duration {
	return time.Duration(float64(d)*(1-rho)) - margin
}

// DefaultHolderMargin is kvlease.DefaultHolderMargin: d/10, clamped to
// [100 ms, 2 s].
func DefaultHolderMargin(d time.Duration) time.Duration {
	return min(max(d/10, 100*time.Millisecond), 2*time.Second)
}

// ServerTTL is kvlease.ServerTTL: how long the server keeps a tenure
// written with duration d, d + m_g rounded up to whole seconds.
func ServerTTL(d, grantorMargin time.Duration) time.Duration {
	t := d + grantorMargin
	if r := t % time.Second; r != 0 {
		t += time.Second - r
	}
	return t
}

// RenewalCutoff is kvlease.RenewalCutoff: how long after the send of a
// write of duration d a correct grantor still renews it, its [ServerTTL]
// less ρ = 1e-3 of it and a guard of min(100 ms, TTL/4).
func RenewalCutoff(d, grantorMargin time.Duration) time.Duration {
	ttl := ServerTTL(d, grantorMargin)
	return ttl - time.Duration(float64(ttl)*1e-3) - min(100*time.Millisecond, ttl/4)
}

// span is the half-open interval [from, to) in monotonic nanoseconds.
type span struct{ from, to int64 }

func (s span) len() int64 { return max(0, s.to-s.from) }

// union sorts and merges spans, dropping empty ones.
func union(ss []span) []span {
	ss = slices.DeleteFunc(slices.Clone(ss), func(s span) bool { return s.to <= s.from })
	slices.SortFunc(ss, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var out []span
	for _, s := range ss {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// measure is the total length of merged spans.
func measure(ss []span) int64 {
	var n int64
	for _, s := range ss {
		n += s.len()
	}
	return n
}

// intersect returns the intersection of two merged span lists.
func intersect(a, b []span) []span {
	var out []span
	for i, j := 0, 0; i < len(a) && j < len(b); {
		from, to := max(a[i].from, b[j].from), min(a[i].to, b[j].to)
		if from < to {
			out = append(out, span{from, to})
		}
		if a[i].to < b[j].to {
			i++
		} else {
			j++
		}
	}
	return out
}
