package kvlease_test

import (
	"context"
	"fmt"
	"sync"
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
