package grantor_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// BenchmarkGrantRelease measures a grant and a release through the service
// against the same two operations through kvlease directly, in the same run
// on the same server, with 1 and 64 concurrent clients. It reports
// direct-ops/s and service-ops/s (one op = grant + release), overhead
// (direct/service time; target ≤ 1.5 for one client) and, at c=64,
// scaling (service ops/s at 64 clients / at 1 client; target ≥ 3).
//
//	go test -run '^$' -bench GrantRelease -benchtime 2000x ./grantor/
func BenchmarkGrantRelease(b *testing.B) {
	for _, sync := range []struct {
		name string
		opts []kvleasetest.ServerOption
	}{
		{"sync=always", nil},
		{"sync=unsafe", []kvleasetest.ServerOption{kvleasetest.WithUnsafeSync()}},
	} {
		b.Run(sync.name, func(b *testing.B) {
			srv := kvleasetest.NewServer(b, sync.opts...)
			cfg := grantor.DefaultConfig()
			cfg.MaxLeasesPerHolder = 0
			st := kvleasetest.OpenStore(b, srv.ClientURL(), cfg.StoreOptions()...)
			svc, err := grantor.New(st, kvleasetest.Connect(b, srv.ClientURL()), cfg)
			if err != nil {
				b.Fatal(err)
			}
			if err := svc.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(svc.Stop)
			// Clients spread over 8 connections, as 64 separate processes
			// would not share one.
			var clients []*grantor.Client
			for range 8 {
				clients = append(clients, grantor.NewClient(kvleasetest.Connect(b, srv.ClientURL())))
			}
			var oneClient float64
			for _, c := range []int{1, 64} {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					direct := run(b, c, func(i, j int) kvlease.Grantor { return st })
					service := run(b, c, func(i, j int) kvlease.Grantor { return clients[j%len(clients)] })
					b.ReportMetric(float64(b.N)/direct.Seconds(), "direct-ops/s")
					b.ReportMetric(float64(b.N)/service.Seconds(), "service-ops/s")
					b.ReportMetric(service.Seconds()/direct.Seconds(), "overhead")
					if c == 1 {
						oneClient = float64(b.N) / service.Seconds()
					} else if oneClient > 0 {
						b.ReportMetric(float64(b.N)/service.Seconds()/oneClient, "scaling")
					}
					b.ReportMetric(0, "ns/op")
				})
			}
		})
	}
}

var benchSeq atomic.Int64

// run does b.N grant+release pairs with c workers and returns the wall time.
func run(b *testing.B, c int, grantorFor func(i, j int) kvlease.Grantor) time.Duration {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	start := time.Now()
	for j := range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				g := grantorFor(i, j)
				name := fmt.Sprintf("bench.%d", benchSeq.Add(1))
				rec, err := g.Grant(ctx, kvlease.GrantRequest{Name: name, Holder: "bench", Duration: 10 * time.Second})
				if err == nil {
					err = g.Release(ctx, kvlease.ReleaseRequest{Name: name, Holder: "bench", Token: rec.Token,
						Revision: rec.Revision, Secret: rec.Secret})
				}
				if err != nil {
					errs <- err
					return
				}
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
