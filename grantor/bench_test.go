package grantor_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
	"github.com/leased/leased/telemetry/telemetrytest"
)

// BenchmarkGrantRelease measures a grant and a release through the service
// against the same two operations through kvlease directly, and against the
// floor under both: a raw JetStream KV create and purge of the same key (two
// synced writes, what any grantor on this bucket must do). All three run in
// the same run on the same server, with 1 and 64 concurrent clients. It
// reports raw-, direct- and service-ops/s (one op = grant + release),
// overhead (service time / direct time; target ≤ 1.5 for one client),
// of-raw (service ops/s / raw ops/s) and, at c=64, scaling (service ops/s at
// 64 clients / at 1 client; target ≥ 3) beside raw-scaling, the same ratio
// for the raw writes: where the disk syncs each write on its own, raw-scaling
// is the ceiling, and a scaling target above it cannot be met by any grantor
// on one stream.
//
//	go test -run '^$' -bench GrantRelease -benchtime 2000x ./grantor/
func BenchmarkGrantRelease(b *testing.B) {
	for _, sync := range []struct {
		name     string
		opts     []kvleasetest.ServerOption
		batching bool // by default: as serve does (no batches where nothing syncs)
	}{
		{"sync=always", nil, true},
		{"sync=unsafe", []kvleasetest.ServerOption{kvleasetest.WithUnsafeSync()}, false},
	} {
		b.Run(sync.name, func(b *testing.B) {
			env := newBenchService(b, sync.opts, sync.batching)
			st, kv, clients, quiet, writes := env.st, env.kv, env.clients, env.quiet, env.writes
			raw := func(ctx context.Context, _ int, name string) error {
				if _, err := kv.Create(ctx, name, []byte("bench"), jetstream.KeyTTL(10*time.Second)); err != nil {
					return err
				}
				return kv.Purge(ctx, name, jetstream.PurgeTTL(10*time.Second))
			}
			var oneClient, rawOneClient float64
			for _, c := range []int{1, 64} {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					quiet()
					raw := run(b, c, raw)
					w0, m0 := writes()
					direct := run(b, c, grantRelease(func(int) kvlease.Grantor { return st }))
					w1, m1 := writes()
					quiet()
					service := run(b, c, grantRelease(func(j int) kvlease.Grantor { return clients[j%len(clients)] }))
					w2, m2 := writes()
					// Messages per synced write: how well group commit
					// merged the clients' writes.
					b.ReportMetric(float64(m1-m0)/float64(w1-w0), "direct-msgs/write")
					b.ReportMetric(float64(m2-m1)/float64(w2-w1), "service-msgs/write")
					b.ReportMetric(float64(b.N)/raw.Seconds(), "raw-ops/s")
					b.ReportMetric(float64(b.N)/direct.Seconds(), "direct-ops/s")
					b.ReportMetric(float64(b.N)/service.Seconds(), "service-ops/s")
					b.ReportMetric(service.Seconds()/direct.Seconds(), "overhead")
					b.ReportMetric(raw.Seconds()/service.Seconds(), "of-raw")
					if c == 1 {
						oneClient, rawOneClient = float64(b.N)/service.Seconds(), float64(b.N)/raw.Seconds()
					} else if oneClient > 0 {
						b.ReportMetric(float64(b.N)/service.Seconds()/oneClient, "scaling")
						b.ReportMetric(float64(b.N)/raw.Seconds()/rawOneClient, "raw-scaling")
					}
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}

// benchService is a service on a server of its own, as the benchmarks run
// it: a store (batching as serve would, unless LEASED_BENCH_BATCH), the
// service on it, a raw bucket of its own for the baseline, and clients
// spread over 8 connections.
type benchService struct {
	srv     *kvleasetest.Server
	st      *kvlease.Store
	kv      jetstream.KeyValue // the raw baseline's bucket, which no observer watches
	clients []*client.Client
	// quiet waits until the service's observer has handled every change
	// of the bucket so far: its history appends (one synced write per
	// grant and per end) from one phase must not load the next one.
	quiet func()
	// writes returns how many synced writes the store has sent so far,
	// and how many messages they carried.
	writes func() (n uint64, msgs int64)
}

func newBenchService(b *testing.B, srvOpts []kvleasetest.ServerOption, batching bool) benchService {
	b.Helper()
	srv := kvleasetest.NewServer(b, srvOpts...)
	cfg := grantor.DefaultConfig()
	cfg.MaxLeasesPerHolder = 0
	reader := sdkmetric.NewManualReader()
	opts := []kvlease.Option{kvlease.WithStoreMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))}
	if l, ok := kvleasetest.BenchBatchLimits(1); ok {
		opts = append(opts, kvlease.WithBatchLimits(l))
	} else if !batching {
		opts = append(opts, kvlease.WithoutBatching())
	}
	// The store and the service share one connection to the server, in
	// process, as in `leased serve`.
	nc := kvleasetest.Connect(b, srv.ClientURL(), nats.InProcessServer(srv.NATS()))
	st := kvleasetest.OpenStoreOn(b, nc, opts...)
	writes := func() (n uint64, msgs int64) {
		for _, t := range telemetrytest.Histogram(b, reader, telemetry.MetricStoreWrites, telemetry.AttrWriteKind) {
			n, msgs = n+t.Count, msgs+t.Sum
		}
		return n, msgs
	}
	svc, err := grantor.New(st, nc, cfg)
	if err != nil {
		b.Fatal(err)
	}
	var observed atomic.Uint64
	progress := make(chan struct{}, 1)
	grantor.SetObservedHook(svc, func(rev uint64) {
		observed.Store(rev)
		select {
		case progress <- struct{}{}:
		default:
		}
	})
	quiet := func() {
		rev, err := st.LastRevision(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for observed.Load() < rev {
			select {
			case <-progress:
			case <-time.After(time.Minute):
				b.Fatalf("the observer is stuck below revision %d (at %d)", rev, observed.Load())
			}
		}
	}
	if err := svc.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(svc.Stop)
	rawStore := kvleasetest.OpenStore(b, srv.ClientURL(), kvlease.WithBucket("rawbench"))
	kv, err := kvleasetest.JetStream(b, kvleasetest.Connect(b, srv.ClientURL())).KeyValue(context.Background(), rawStore.Bucket())
	if err != nil {
		b.Fatal(err)
	}
	// Clients spread over 8 connections, as 64 separate processes would
	// not share one.
	var clients []*client.Client
	for range 8 {
		clients = append(clients, newClient(b, kvleasetest.Connect(b, srv.ClientURL())))
	}
	return benchService{srv: srv, st: st, kv: kv, clients: clients, quiet: quiet, writes: writes}
}

// grantRelease is one benchmark op: a grant and its release through the
// grantor that client j uses.
func grantRelease(grantorFor func(j int) kvlease.Grantor) func(ctx context.Context, j int, name string) error {
	return func(ctx context.Context, j int, name string) error {
		g := grantorFor(j)
		rec, err := g.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "bench", Duration: 10 * time.Second})
		if err != nil {
			return err
		}
		return g.Release(ctx, kvlease.ReleaseRequest{Name: name, Holder: "bench", Token: rec.Token,
			Revision: rec.Revision, Secret: rec.Secret})
	}
}

var benchSeq atomic.Int64

// run does b.N ops with c workers, each op on a lease name of its own, and
// returns the wall time.
func run(b *testing.B, c int, op func(ctx context.Context, j int, name string) error) time.Duration {
	b.Helper()
	ctx := context.Background()
	return measure(b, c, func(j int) error { return op(ctx, j, fmt.Sprintf("bench.%d", benchSeq.Add(1))) }).wall
}

// BenchmarkServiceRenew measures what a renewal through the service costs
// the process (client, service and embedded server together, as in one
// `serve` with its callers) against the raw write under it, a JetStream
// publish with an expected last subject sequence and a TTL, in the same
// run: ops/s, CPU µs and bytes allocated per op, and their ratios. Each of
// c clients renews a lease of its own in a loop. With sync=unsafe the
// server does not wait for the disk, so the figures are CPU: the cost a
// loaded node pays per renewal (`leased bench --live`).
//
//	go test -run '^$' -bench ServiceRenew -benchtime 20000x ./grantor/
func BenchmarkServiceRenew(b *testing.B) {
	for _, sync := range []struct {
		name     string
		opts     []kvleasetest.ServerOption
		batching bool
	}{
		{"sync=unsafe", []kvleasetest.ServerOption{kvleasetest.WithUnsafeSync()}, false},
		{"sync=always", nil, true},
	} {
		b.Run(sync.name, func(b *testing.B) {
			env := newBenchService(b, sync.opts, sync.batching)
			js := kvleasetest.JetStream(b, kvleasetest.Connect(b, env.srv.ClientURL()))
			for _, c := range []int{64} {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					ctx := context.Background()
					rawRev := make([]uint64, c)
					recs := make([]kvlease.Record, c)
					for j := range c {
						var err error
						name := fmt.Sprintf("renew.%d", benchSeq.Add(1))
						if rawRev[j], err = env.kv.Create(ctx, name, []byte("bench"), jetstream.KeyTTL(10*time.Second)); err != nil {
							b.Fatal(err)
						}
						if recs[j], err = env.clients[j%len(env.clients)].Grant(ctx, kvlease.GrantRequest{Name: name,
							Holder: "bench-holder-0001", Duration: 10 * time.Second}); err != nil {
							b.Fatal(err)
						}
					}
					env.quiet()
					raw := measure(b, c, func(j int) error {
						ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "$KV." + env.kv.Bucket() + "." + recs[j].Name, Data: []byte("bench")},
							jetstream.WithExpectLastSequencePerSubject(rawRev[j]), jetstream.WithMsgTTL(10*time.Second))
						if err == nil {
							rawRev[j] = ack.Sequence
						}
						return err
					})
					env.quiet()
					service := measure(b, c, func(j int) error {
						r := recs[j]
						next, err := env.clients[j%len(env.clients)].Renew(ctx, kvlease.RenewRequest{Name: r.Name,
							Holder: r.Holder, Token: r.Token, Revision: r.Revision, Secret: r.Secret})
						if err == nil {
							next.Secret = r.Secret // a renewal's reply does not repeat it
							recs[j] = next
						}
						return err
					})
					n := float64(b.N)
					b.ReportMetric(n/raw.wall.Seconds(), "raw-ops/s")
					b.ReportMetric(n/service.wall.Seconds(), "service-ops/s")
					b.ReportMetric(float64(raw.cpu.Microseconds())/n, "raw-cpu-µs/op")
					b.ReportMetric(float64(service.cpu.Microseconds())/n, "service-cpu-µs/op")
					b.ReportMetric(float64(service.cpu)/float64(raw.cpu), "cpu-of-raw")
					b.ReportMetric(float64(raw.bytes)/n, "raw-B/op")
					b.ReportMetric(float64(service.bytes)/n, "service-B/op")
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}

// cost is what a benchmark phase took: wall time, the process's CPU time
// (user and system) and the bytes it allocated.
type cost struct {
	wall, cpu time.Duration
	bytes     uint64
}

// measure does b.N ops with c workers, op(j) by worker j, and returns
// their cost.
func measure(b *testing.B, c int, op func(j int) error) cost {
	b.Helper()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	cpu0 := processCPU(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	start := time.Now()
	for j := range c {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if err := op(j); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	out := cost{wall: time.Since(start), cpu: processCPU(b) - cpu0}
	runtime.ReadMemStats(&m1)
	out.bytes = m1.TotalAlloc - m0.TotalAlloc
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return out
}

// processCPU is the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
