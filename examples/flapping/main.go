// Command flapping shows a lease that changes hands too often, and how it
// looks in Jaeger.
//
// Two holders campaign for "leader.flappy" with a lease of 1 s, and each
// pauses for longer than that while it leads (here: it stops renewing, as a
// long GC pause or an overloaded VM would). Each pause costs it the lease;
// the other takes over; the lease flaps. A grantor service runs in the same
// process: it counts new tenures, flags the lease as flapping after more
// than three in a minute, and records each change as a span
// ("lease.ownership_change", with lease.flapping and a link to the grant).
//
// Usage:
//
//	OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 OTEL_METRICS_EXPORTER=none \
//	  go run ./examples/flapping [-nats-url URL] [-changes 6]
//
// It runs a lease service of its own, on the bucket "flapping": with
// -nats-url, give it a NATS account where no `leased serve` runs (a lease
// service refuses to start beside another bucket's).
//
// Then open Jaeger (http://localhost:16686), service "leased-flapping":
// search for operation lease.ownership_change, or tag lease.flapping=true.
// Without OTEL_EXPORTER_OTLP_ENDPOINT nothing is exported; the narrative
// still shows the flapping.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/telemetry/otelsetup"
)

const (
	bucket       = "flapping"
	electionName = "leader.flappy"
	leaseD       = time.Second
)

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	changes := flag.Int("changes", 6, "tenures to show (each a new leader), at least 1")
	flag.Parse()
	if *changes < 1 || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: flapping [-nats-url URL] [-changes N], N at least 1")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := otelsetup.Setup(ctx, "leased-flapping", nil) // exporters from OTEL_* variables
	if err != nil {
		log.Fatal(err)
	}
	err = demo.WithServer(*natsURL, func(url string) error { return run(ctx, os.Stdout, url, *changes) })
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = tel.Shutdown(sctx) // flush the spans
	cancel()
	if err != nil {
		log.Fatal(err)
	}
}

// run starts a grantor service and two pausing holders, and returns once
// the lease has had n leaders and been flagged as flapping.
func run(ctx context.Context, w io.Writer, natsURL string, n int) error {
	// Each tenure takes about 2 s (work, then a pause past the lease):
	// without a bound, a server gone mid-run left it waiting for good
	// (found by an outside client).
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second+time.Duration(n)*5*time.Second)
	defer cancel()
	open := func(name string) (*nats.Conn, *kvlease.Store, error) {
		nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(name))...)
		if err != nil {
			return nil, nil, err
		}
		js, _ := jetstream.New(nc) // fails only on a bad option
		st, err := kvlease.Open(ctx, js, kvlease.WithBucket(bucket), kvlease.WithGrantorMargin(0))
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, st, nil
	}
	nc, st, err := open("grantor")
	if err != nil {
		return err
	}
	defer nc.Close()
	svc, err := grantor.New(st, nc, grantor.DefaultConfig(), grantor.WithMeterProvider(otel.GetMeterProvider()))
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return err
	}
	defer svc.Stop()

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format+"\n", args...)
	}
	leads := make(chan string, n)
	var wg sync.WaitGroup
	for _, name := range []string{"holder-a", "holder-b"} {
		hnc, hst, err := open(name)
		if err != nil {
			return err
		}
		defer hnc.Close()
		e, err := election.New(hst, electionName)
		if err != nil {
			return err
		}
		wg.Go(func() {
			for ctx.Err() == nil {
				lead, err := e.Campaign(ctx, name, leaseD)
				if err != nil {
					if ctx.Err() == nil {
						say("%s: campaign: %v", name, err)
					}
					return
				}
				start := time.Now()
				say("%s leads (token %d)", name, lead.Token())
				select {
				case leads <- name:
				default: // run has seen its n; it waits for the flag (after 4 tenures)
				}
				time.Sleep(200 * time.Millisecond) // some work
				lead.Orphan()                      // then a pause longer than the lease: no renewals
				// The pause outlasts the holder's deadline and the server's
				// lapse (TTL plus up to ~250 ms), so the other holder, waiting
				// on the stream, is first to take the lease.
				select {
				case <-time.After(time.Until(lead.Lease().Deadline()) + 700*time.Millisecond):
				case <-ctx.Done():
					return
				}
				say("%s paused past its deadline after %v: it lost the lease", name, time.Since(start).Round(10*time.Millisecond))
			}
		})
	}
	for i := range n {
		select {
		case <-leads:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d leaders seen: %w", i, n, ctx.Err())
		}
	}
	// The service saw the same changes on the bucket's stream.
	client, err := client.New(nc)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		ls, err := client.List(ctx, electionName)
		if err == nil && len(ls) == 1 && ls[0].Flapping {
			say("the grantor flags %s as FLAPPING (more than 3 new tenures in a minute)", electionName)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the lease was not flagged as flapping")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	return nil
}
