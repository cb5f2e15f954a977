package cli

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/kvlease"
)

// The variants of --compare, in the order the first round runs them:
// with --direct the ways of writing the bucket, else the service against
// the raw writes under it.
var (
	compareDirect  = []string{"raw", "unbatched", "batched"}
	compareService = []string{"raw", "service"}
)

// CompareResult is what --compare prints: every run, and per variant the
// medians over the rounds, with its ops/s as a ratio to raw's.
type CompareResult struct {
	Op       string   `json:"op"`
	Variants []string `json:"variants"`
	URL      string   `json:"url"`
	Clients  int      `json:"clients"`
	TTL      string   `json:"ttl"`
	// Rounds holds each round's runs, by variant.
	Rounds []map[string]OpsResult `json:"rounds"`
	// Median is per variant, over Rounds (none if no round was complete).
	Median map[string]CompareMedian `json:"median"`
	// StoppedEarly: interrupted; Rounds holds the rounds it completed,
	// without the one the interrupt cut off.
	StoppedEarly bool `json:"stopped_early,omitempty"`
}

// CompareMedian is one variant's medians over the rounds. OfRaw is the
// median of the per-round ratios of its ops/s to raw's in the same round.
type CompareMedian struct {
	OpsPerSec float64 `json:"ops_per_sec"`
	P50       float64 `json:"p50_ms"`
	P99       float64 `json:"p99_ms"`
	OfRaw     float64 `json:"of_raw"`
	Errors    int     `json:"errors"`
}

// runCompare runs the --op benchmark --compare times on each variant in
// turn: the raw baseline, and with --direct the lease store without
// batching and with it (as serve runs it), else the service. Each round
// starts with the next variant, so that none always runs first, or always
// right after the others (whose leases lapse, and load the server, during
// later runs). Interrupted, it returns the rounds it completed (none:
// [ErrBenchFailed]), without the one cut off, which has no ratio to
// raw's for every variant (it failed "no grant succeeded" instead, and
// printed none of the rounds it had measured; found by an outside
// client). A run in which nothing
// succeeded (the server gone) ends it with [ErrBenchFailed], and the
// rounds completed before it.
func (b *bench) runCompare(ctx context.Context, c *connFlags, nc *nats.Conn) (CompareResult, error) {
	raw, err := c.openRaw(ctx, nc, b.f.bucket)
	if err != nil {
		return CompareResult{}, err
	}
	variants, grantors := compareService, map[string]kvlease.Grantor{"raw": raw}
	if b.f.direct {
		variants = compareDirect
		if grantors["unbatched"], err = c.openStore(ctx, nc, b.f.bucket, kvlease.WithoutBatching()); err != nil {
			return CompareResult{}, err
		}
		if grantors["batched"], err = c.openStore(ctx, nc, b.f.bucket); err != nil {
			return CompareResult{}, err
		}
	} else if grantors["service"], err = c.client(nc); err != nil {
		return CompareResult{}, err
	}
	res := CompareResult{Op: b.f.op, Variants: variants, URL: b.url, Clients: b.f.clients, TTL: b.f.ttl.String()}
	var failed error
rounds:
	for n := range b.f.compare {
		round := map[string]OpsResult{}
		for x := range variants {
			v := variants[(n+x)%len(variants)]
			// A run of its own: new names, none held by an earlier run.
			b.g, b.via, b.run = grantors[v], v, newRunID()
			r, err := b.runOps(ctx)
			if err != nil {
				return CompareResult{}, err
			}
			if r.StoppedEarly {
				res.StoppedEarly = true
				break rounds
			}
			if r.Ops == 0 {
				failed = fmt.Errorf("%w: no %s succeeded (%s)", ErrBenchFailed, b.f.op, v)
				break rounds
			}
			round[v] = r
		}
		res.Rounds = append(res.Rounds, round)
	}
	res.Median = map[string]CompareMedian{}
	if len(res.Rounds) == 0 { // interrupted, or failed, in the first round
		if failed == nil {
			// Nothing to compare: it exited 0 with no round and no
			// median, which a script took for a run (found by an
			// outside client).
			failed = fmt.Errorf("%w: interrupted in round 1: no round completed, nothing to compare", ErrBenchFailed)
		}
		return res, failed
	}
	for _, v := range variants {
		var ops, p50, p99, ratio []float64
		m := CompareMedian{}
		for _, round := range res.Rounds {
			r := round[v]
			ops, p50, p99 = append(ops, r.OpsPerSec), append(p50, r.Latency.P50), append(p99, r.Latency.P99)
			ratio = append(ratio, r.OpsPerSec/round["raw"].OpsPerSec)
			m.Errors += r.Errors
		}
		m.OpsPerSec, m.P50, m.P99 = median(ops), median(p50), median(p99)
		m.OfRaw = math.Round(median(ratio)*100) / 100
		res.Median[v] = m
	}
	return res, failed
}

// median of xs (not empty), the mean of the middle two for an even count.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r CompareResult) print(p printer) {
	if p.json {
		p.obj(r)
		return
	}
	p.line("bench compare op=%s url=%s clients=%d ttl=%s rounds=%d", r.Op, r.URL, r.Clients, r.TTL, len(r.Rounds))
	for i, round := range r.Rounds {
		line, ratios := fmt.Sprintf("round %d:", i+1), ""
		for _, v := range r.Variants {
			line += fmt.Sprintf(" %s=%.1f", v, round[v].OpsPerSec)
			if v != "raw" {
				ratios += fmt.Sprintf(" %s=%.2f", v, round[v].OpsPerSec/round["raw"].OpsPerSec)
			}
		}
		p.line("%s ops/s, of raw:%s", line, ratios)
	}
	for _, v := range r.Variants {
		m, ok := r.Median[v]
		if !ok {
			break
		}
		p.line("median %-9s ops_per_sec=%.1f of_raw=%.2f p50=%.3fms p99=%.3fms errors=%d", v, m.OpsPerSec, m.OfRaw, m.P50, m.P99, m.Errors)
	}
	if r.StoppedEarly {
		p.line("stopped early (interrupted) in round %d, which is left out", len(r.Rounds)+1)
	}
}
