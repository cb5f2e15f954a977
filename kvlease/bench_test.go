package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The benchmarks compare each lease operation with the raw JetStream
// operation it is built on, interleaved in the same loop on the same server
// and bucket, so machine noise hits both alike. They report raw-ops/s,
// lease-ops/s and ratio (lease/raw; target ≥ 0.8), with sync before ack
// (the default) and without (unsafe), sequentially (c=1) and with 16
// concurrent callers (c=16).
//
//	go test -run '^$' -bench . -benchtime 2000x ./kvlease/

type benchEnv struct {
	st  *kvlease.Store
	js  jetstream.JetStream
	kv  jetstream.KeyValue
	val []byte
}

func benchModes(b *testing.B, fn func(b *testing.B, env benchEnv, c int)) {
	for _, mode := range []struct {
		name string
		opts []kvleasetest.ServerOption
	}{
		{"sync=always", nil},
		{"sync=unsafe", []kvleasetest.ServerOption{kvleasetest.WithUnsafeSync()}},
	} {
		for _, c := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/c=%d", mode.name, c), func(b *testing.B) {
				srv := kvleasetest.NewServer(b, mode.opts...)
				st := kvleasetest.OpenStore(b, srv.ClientURL(), kvlease.WithGrantorMargin(0))
				js := kvleasetest.JetStream(b, kvleasetest.Connect(b, srv.ClientURL()))
				kv, err := js.KeyValue(context.Background(), kvlease.DefaultBucket)
				if err != nil {
					b.Fatal(err)
				}
				// A raw value the size of a lease record.
				val := []byte(`{"holder":"bench-holder-0001","duration_ms":10000}`)
				fn(b, benchEnv{st: st, js: js, kv: kv, val: val}, c)
			})
		}
	}
}

// timed runs op(j) for j in [0, c) concurrently and returns the wall time.
func timed(b *testing.B, c int, op func(j int) error) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, c)
	for j := range c {
		wg.Go(func() {
			if err := op(j); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

func report(b *testing.B, c int, raw, lease time.Duration) {
	n := float64(b.N * c)
	rawOps, leaseOps := n/raw.Seconds(), n/lease.Seconds()
	b.ReportMetric(rawOps, "raw-ops/s")
	b.ReportMetric(leaseOps, "lease-ops/s")
	b.ReportMetric(leaseOps/rawOps, "ratio")
	b.ReportMetric(0, "ns/op") // the pair's time is not a useful figure
}

// Grant (create with TTL on a free name) against kv.Create with KeyTTL.
func BenchmarkGrant(b *testing.B) {
	benchModes(b, func(b *testing.B, env benchEnv, c int) {
		ctx := context.Background()
		var raw, lease time.Duration
		b.ResetTimer()
		for i := range b.N {
			raw += timed(b, c, func(j int) error {
				_, err := env.kv.Create(ctx, fmt.Sprintf("raw.%d.%d", i, j), env.val, jetstream.KeyTTL(10*time.Second))
				return err
			})
			lease += timed(b, c, func(j int) error {
				_, err := env.st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("lease.%d.%d", i, j),
					Holder: "bench-holder-0001", Duration: 10 * time.Second})
				return err
			})
		}
		report(b, c, raw, lease)
	})
}

// Renew (verify + compare-and-set with TTL) against a raw publish with an
// expected last subject sequence and a TTL.
func BenchmarkRenew(b *testing.B) {
	benchModes(b, func(b *testing.B, env benchEnv, c int) {
		ctx := context.Background()
		rawRev := make([]uint64, c)
		recs := make([]kvlease.Record, c)
		for j := range c {
			var err error
			if rawRev[j], err = env.kv.Create(ctx, fmt.Sprintf("raw.%d", j), env.val, jetstream.KeyTTL(10*time.Second)); err != nil {
				b.Fatal(err)
			}
			if recs[j], err = env.st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("lease.%d", j),
				Holder: "bench-holder-0001", Duration: 10 * time.Second}); err != nil {
				b.Fatal(err)
			}
		}
		var raw, lease time.Duration
		b.ResetTimer()
		for range b.N {
			raw += timed(b, c, func(j int) error {
				ack, err := env.js.PublishMsg(ctx, &nats.Msg{Subject: fmt.Sprintf("$KV.%s.raw.%d", kvlease.DefaultBucket, j), Data: env.val},
					jetstream.WithExpectLastSequencePerSubject(rawRev[j]), jetstream.WithMsgTTL(10*time.Second))
				if err == nil {
					rawRev[j] = ack.Sequence
				}
				return err
			})
			lease += timed(b, c, func(j int) error {
				r := recs[j]
				next, err := env.st.Renew(ctx, kvlease.RenewRequest{Name: r.Name, Holder: r.Holder, Token: r.Token,
					Revision: r.Revision, Duration: 10 * time.Second})
				if err == nil {
					recs[j] = next
				}
				return err
			})
		}
		report(b, c, raw, lease)
	})
}

// Group commit (issue 13). BenchmarkGroupCommit compares, in the same run
// on the same server and bucket, three ways to make c concurrent clients'
// writes durable (sync always): raw single-message KV writes (the
// floor: what JetStream gives one publish per write), the Store without
// batching, and the Store with its default group commit. Each client
// loops on its own operations (no barrier between them), the three take
// turns within every iteration, and each reports ops/s, p50 and p99
// latency, and its ratio to raw.
//
//	go test -run '^$' -bench GroupCommit -benchtime 3x ./kvlease/
//	go test -run '^$' -bench 'GroupCommit/renew/R1/c=64' -benchtime 3x ./kvlease/  (one row)
//	LEASED_BENCH_R3=1 … also runs a three-node cluster (R3).
//	LEASED_BENCH_UNSAFE_SYNC=1 … runs servers that acknowledge before they
//	sync (serve --sync unsafe-interval, or a NATS server's default
//	sync_interval).
//
// BenchmarkBatchBreakEven times k creates as one atomic batch against k
// single publishes sent together, for the break-even of
// BatchLimits.MinMessages (ratio > 1: the batch pays).

// gcOpsPerClient is how many operations each of c clients does per
// variant per iteration: at least 8, and at least 512 in all, so that one
// client's figures are not a few milliseconds' worth.
func gcOpsPerClient(c int) int { return max(8, 512/c) }

type gcVariant struct {
	name string
	op   func(ctx context.Context, client, k int) error
}

type gcResult struct {
	took time.Duration
	lats []time.Duration
}

func (r *gcResult) run(c int, op func(client, k int) error) error {
	var wg sync.WaitGroup
	lats := make([][]time.Duration, c)
	errs := make([]error, c)
	start := time.Now()
	for j := range c {
		wg.Go(func() {
			for k := range gcOpsPerClient(c) {
				t0 := time.Now()
				if err := op(j, k); err != nil {
					errs[j] = err
					return
				}
				lats[j] = append(lats[j], time.Since(t0))
			}
		})
	}
	wg.Wait()
	r.took += time.Since(start)
	for _, l := range lats {
		r.lats = append(r.lats, l...)
	}
	return errors.Join(errs...)
}

func (r *gcResult) opsPerSec() float64 { return float64(len(r.lats)) / r.took.Seconds() }

func (r *gcResult) quantile(q float64) time.Duration {
	if len(r.lats) == 0 {
		return 0
	}
	s := slices.Clone(r.lats)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

type gcEnv struct {
	batched, unbatched *kvlease.Store
	js                 jetstream.JetStream
	kv                 jetstream.KeyValue
	val                []byte
}

func gcTopologies(b *testing.B, fn func(b *testing.B, env gcEnv, c int)) {
	gcTopologiesAt(b, []int{1, 16, 64, 256}, fn)
}

func gcTopologiesAt(b *testing.B, counts []int, fn func(b *testing.B, env gcEnv, c int)) {
	type topo struct {
		name  string
		start func(b *testing.B) (url string, replicas int)
	}
	var srvOpts []kvleasetest.ServerOption
	if os.Getenv("LEASED_BENCH_UNSAFE_SYNC") == "1" {
		srvOpts = append(srvOpts, kvleasetest.WithUnsafeSync())
	}
	topos := []topo{{"R1", func(b *testing.B) (string, int) { return kvleasetest.NewServer(b, srvOpts...).ClientURL(), 1 }}}
	if os.Getenv("LEASED_BENCH_R3") == "1" {
		topos = append(topos, topo{"R3", func(b *testing.B) (string, int) {
			return kvleasetest.NewCluster(b, 3, srvOpts...)[0].ClientURL(), 3
		}})
	}
	for _, tp := range topos {
		for _, c := range counts {
			b.Run(fmt.Sprintf("%s/c=%d", tp.name, c), func(b *testing.B) {
				url, r := tp.start(b)
				opts := []kvlease.Option{kvlease.WithGrantorMargin(0), kvlease.WithReplicas(r)}
				bopts := opts
				if l, ok := kvleasetest.BenchBatchLimits(r); ok {
					bopts = append(bopts, kvlease.WithBatchLimits(l))
				}
				batched := kvleasetest.OpenStore(b, url, bopts...)
				unbatched := kvleasetest.OpenStore(b, url, append(opts, kvlease.WithoutBatching())...)
				js := kvleasetest.JetStream(b, kvleasetest.Connect(b, url))
				kv, err := js.KeyValue(context.Background(), kvlease.DefaultBucket)
				if err != nil {
					b.Fatal(err)
				}
				fn(b, gcEnv{batched: batched, unbatched: unbatched, js: js, kv: kv,
					val: []byte(`{"holder":"bench-holder-0001","duration_ms":10000}`)}, c)
			})
		}
	}
}

// gcMeasure runs the variants in turn b.N times, each iteration starting
// with the next one (so that none always runs first or last), and reports
// them.
func gcMeasure(b *testing.B, c int, variants []gcVariant) {
	ctx := context.Background()
	res := make([]gcResult, len(variants))
	b.ResetTimer()
	for n := range b.N {
		for x := range variants {
			i := (n + x) % len(variants)
			v := variants[i]
			if err := res[i].run(c, func(j, k int) error { return v.op(ctx, j, k) }); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
		}
	}
	b.StopTimer()
	raw := res[0].opsPerSec()
	for i, v := range variants {
		b.ReportMetric(res[i].opsPerSec(), v.name+"-ops/s")
		b.ReportMetric(float64(res[i].quantile(0.5).Microseconds()), v.name+"-p50-µs")
		b.ReportMetric(float64(res[i].quantile(0.99).Microseconds()), v.name+"-p99-µs")
		if i > 0 {
			b.ReportMetric(res[i].opsPerSec()/raw, v.name+"/raw")
		}
	}
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGroupCommit's operations: grant and renew. (Its name matches
// neither "Grant" nor "Renew": CI's smoke run of those takes 100
// iterations, which here would take minutes; CI runs it once.)
func BenchmarkGroupCommit(b *testing.B) {
	b.Run("grant", benchGroupCommitGrant)
	b.Run("renew", benchGroupCommitRenew)
}

// Grants of fresh names (create with TTL) against kv.Create with KeyTTL.
func benchGroupCommitGrant(b *testing.B) {
	gcTopologies(b, func(b *testing.B, env gcEnv, c int) {
		var seq atomic.Int64
		grant := func(st *kvlease.Store, prefix string, withID bool) func(ctx context.Context, j, k int) error {
			return func(ctx context.Context, j, k int) error {
				req := kvlease.GrantRequest{Name: fmt.Sprintf("%s.%d", prefix, seq.Add(1)),
					Holder: "bench-holder-0001", Duration: 10 * time.Second}
				if withID { // as kvlease.Acquire sends it: a message ID the stream deduplicates on
					req.RequestID, req.Secret = kvlease.NewRequestID()
				}
				_, err := st.Grant(ctx, req)
				return err
			}
		}
		gcMeasure(b, c, []gcVariant{
			{"raw", func(ctx context.Context, j, k int) error {
				_, err := env.kv.Create(ctx, fmt.Sprintf("raw.%d", seq.Add(1)), env.val, jetstream.KeyTTL(10*time.Second))
				return err
			}},
			{"unbatched", grant(env.unbatched, "u", false)},
			{"batched", grant(env.batched, "b", false)},
			{"batched+request-id", grant(env.batched, "i", true)},
		})
	})
}

// Renewals (verify + compare-and-set with TTL) against raw publishes with
// an expected last subject sequence and a TTL, each client on its own key.
func benchGroupCommitRenew(b *testing.B) {
	gcTopologies(b, func(b *testing.B, env gcEnv, c int) {
		ctx := context.Background()
		rawRev := make([]uint64, c)
		recs := map[*kvlease.Store][]kvlease.Record{env.batched: make([]kvlease.Record, c), env.unbatched: make([]kvlease.Record, c)}
		for j := range c {
			var err error
			if rawRev[j], err = env.kv.Create(ctx, fmt.Sprintf("raw.%d", j), env.val, jetstream.KeyTTL(30*time.Second)); err != nil {
				b.Fatal(err)
			}
			for st, rs := range recs {
				if rs[j], err = st.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("lease.%p.%d", st, j),
					Holder: "bench-holder-0001", Duration: 30 * time.Second}); err != nil {
					b.Fatal(err)
				}
			}
		}
		renew := func(st *kvlease.Store) func(ctx context.Context, j, k int) error {
			rs := recs[st]
			return func(ctx context.Context, j, k int) error {
				r := rs[j]
				next, err := st.Renew(ctx, kvlease.RenewRequest{Name: r.Name, Holder: r.Holder, Token: r.Token,
					Revision: r.Revision, Duration: 30 * time.Second})
				if err == nil {
					rs[j] = next
				}
				return err
			}
		}
		gcMeasure(b, c, []gcVariant{
			{"raw", func(ctx context.Context, j, k int) error {
				ack, err := env.js.PublishMsg(ctx, &nats.Msg{Subject: fmt.Sprintf("$KV.%s.raw.%d", kvlease.DefaultBucket, j), Data: env.val},
					jetstream.WithExpectLastSequencePerSubject(rawRev[j]), jetstream.WithMsgTTL(30*time.Second))
				if err == nil {
					rawRev[j] = ack.Sequence
				}
				return err
			}},
			{"unbatched", renew(env.unbatched)},
			{"batched", renew(env.batched)},
		})
	})
}

func BenchmarkBatchBreakEven(b *testing.B) {
	gcTopologiesAt(b, []int{2, 4, 8, 16, 32, 64}, func(b *testing.B, env gcEnv, k int) {
		ctx := context.Background()
		var seq atomic.Int64
		var batch, singles time.Duration
		names := func() []string {
			out := make([]string, k)
			for i := range out {
				out[i] = fmt.Sprintf("be.%d", seq.Add(1))
			}
			return out
		}
		b.ResetTimer()
		for range b.N {
			for range 8 {
				t0 := time.Now()
				if err := kvlease.CreateRaw(ctx, env.batched, names(), env.val, 10*time.Second, false); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := kvlease.CreateRaw(ctx, env.batched, names(), env.val, 10*time.Second, true); err != nil {
					b.Fatal(err)
				}
				singles += t1.Sub(t0)
				batch += time.Since(t1)
			}
		}
		b.StopTimer()
		b.ReportMetric(singles.Seconds()/batch.Seconds(), "batch/singles")
		b.ReportMetric(float64(8*b.N*k)/batch.Seconds(), "batch-ops/s")
		b.ReportMetric(float64(8*b.N*k)/singles.Seconds(), "singles-ops/s")
		b.ReportMetric(0, "ns/op")
	})
}
