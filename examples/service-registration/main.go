// Command service-registration shows service registration and discovery on
// leases.
//
// Two instances of the service "web", each with its own NATS connection as if
// it were its own process, register with short TTLs and keep their
// registrations renewed. A registry follows the registrations by watching the
// lease bucket, lists the instances (Discover) and prints every change
// (Watch). Then web-1 shuts down cleanly and deregisters: it is removed at
// once, with cause "deregistered". web-2 crashes: nothing renews its
// registration any more, and it is removed when its TTL lapses at the server,
// with cause "ttl".
//
// The instances register directly on a lease store; the registry runs without
// gossip (a grantor node with gossip would also remove the registrations of
// nodes gossip declares dead, with cause "gossip").
//
// Usage:
//
//	go run ./examples/service-registration [-nats-url nats://host:4222]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. It uses the lease bucket
// "service-registration".
//
// Registrations last 1 s and the store adds no grantor margin, so that the
// crashed instance is removed in about a second. In production use longer
// TTLs and keep the default grantor margin: it absorbs forward steps of the
// server's clock.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
)

const (
	leaseBucket = "service-registration"
	service     = "web"
	ttl         = time.Second
)

// The instances, as they register.
var instances = []api.Registration{
	{Service: service, Instance: "web-1", Addr: "10.0.0.1:8080", Meta: map[string]string{"zone": "a", "version": "1.4.2"}},
	{Service: service, Instance: "web-2", Addr: "10.0.0.2:8080", Meta: map[string]string{"zone": "b", "version": "1.4.2"}},
}

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.WithServer(*natsURL, func(url string) error { return run(ctx, os.Stdout, url) }); err != nil {
		log.Fatal(err)
	}
}

// connect opens who's own connection and lease store, as if it were its
// own process.
func connect(ctx context.Context, who, natsURL string) (*nats.Conn, *kvlease.Store, error) {
	nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(who))...)
	if err != nil {
		return nil, nil, err
	}
	js, _ := jetstream.New(nc) // fails only on a bad option
	st, err := kvlease.Open(ctx, js, kvlease.WithBucket(leaseBucket), kvlease.WithGrantorMargin(0))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", who, err)
	}
	return nc, st, nil
}

// describe formats an instance for the narrative.
func describe(in api.Instance) string {
	var meta []string
	for _, k := range slices.Sorted(maps.Keys(in.Meta)) {
		meta = append(meta, k+"="+in.Meta[k])
	}
	return fmt.Sprintf("%s/%s at %s (token %d, %s)", in.Service, in.Instance, in.Addr, in.Token, strings.Join(meta, " "))
}

// printer prints the registry's changes as they come, leaving out renewals.
type printer struct {
	w       io.Writer
	changes <-chan registry.Change
}

// await prints changes until one of type typ for instance arrives, and
// returns it.
func (p *printer) await(ctx context.Context, typ, instance string) (registry.Change, error) {
	for {
		select {
		case c, ok := <-p.changes:
			if !ok {
				return registry.Change{}, fmt.Errorf("registry watch ended waiting for %s %s: %w", instance, typ, ctx.Err())
			}
			switch c.Type {
			case registry.ChangeRemoved:
				fmt.Fprintf(p.w, "registry: removed %s/%s, cause %q\n", c.Instance.Service, c.Instance.Instance, c.Cause)
			default:
				fmt.Fprintf(p.w, "registry: %s %s\n", c.Type, describe(c.Instance))
			}
			if c.Type == typ && c.Instance.Instance == instance {
				return c, nil
			}
		case <-ctx.Done():
			return registry.Change{}, fmt.Errorf("waiting for %s %s: %w", instance, typ, ctx.Err())
		}
	}
}

// discover prints what discovery answers for the service.
func discover(ctx context.Context, w io.Writer, reg *registry.Registry) []api.Instance {
	found := reg.Discover(ctx, service, 0)
	var names []string
	for _, in := range found {
		names = append(names, in.Instance+" at "+in.Addr)
	}
	if len(names) == 0 {
		names = []string{"no instances"}
	}
	fmt.Fprintf(w, "discover %q: %s\n", service, strings.Join(names, ", "))
	return found
}

// run tells the story against the NATS server at natsURL, writing it to w.
// It returns an error if any step does not go as told.
func run(ctx context.Context, w io.Writer, natsURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	// The registry: no gossip, so registrations end only by deregistration,
	// TTL or revocation.
	nc, st, err := connect(ctx, "registry", natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	reg, err := registry.New(st)
	if err != nil {
		return err
	}
	if err := reg.Start(ctx); err != nil {
		return err
	}
	defer reg.Stop()
	p := &printer{w: w, changes: reg.Watch(ctx, service)}

	// Each instance registers from its own connection and keeps its
	// registration renewed.
	keepers := make([]*kvlease.Keeper, len(instances))
	for i, r := range instances {
		inc, ist, err := connect(ctx, r.Instance, natsURL)
		if err != nil {
			return err
		}
		defer inc.Close()
		k, err := client.Register(ctx, ist, r, r.Instance, ttl)
		if err != nil {
			return fmt.Errorf("%s: register: %w", r.Instance, err)
		}
		defer k.Orphan() // on early returns: the registration lapses
		keepers[i] = k
		fmt.Fprintf(w, "%s: registered %s at %s with TTL %v\n", r.Instance, r.LeaseName(), r.Addr, ttl)
		if _, err := p.await(ctx, registry.ChangeAdded, r.Instance); err != nil {
			return err
		}
	}
	if found := discover(ctx, w, reg); len(found) != len(instances) {
		return fmt.Errorf("discovered %d instances, want %d", len(found), len(instances))
	}

	// Renewals keep both registered well past their TTL.
	select {
	case <-time.After(3 * ttl / 2):
	case <-ctx.Done():
		return ctx.Err()
	}
	var renewals int64
	for _, k := range keepers {
		renewals += k.Stats().Renewals
	}
	fmt.Fprintf(w, "%v later (TTL %v) both are still registered, after %d renewals\n", 3*ttl/2, ttl, renewals)
	if found := discover(ctx, w, reg); len(found) != len(instances) {
		return fmt.Errorf("discovered %d instances, want %d", len(found), len(instances))
	}

	// web-1 shuts down cleanly: closing its keeper releases the lease.
	web1, web2 := instances[0].Instance, instances[1].Instance
	fmt.Fprintf(w, "%s: shuts down and deregisters\n", web1)
	if err := keepers[0].Close(ctx); err != nil {
		return fmt.Errorf("%s: deregister: %w", web1, err)
	}
	c, err := p.await(ctx, registry.ChangeRemoved, web1)
	if err != nil {
		return err
	}
	if c.Cause != registry.CauseDeregistered {
		return fmt.Errorf("%s removed with cause %q, want %q", web1, c.Cause, registry.CauseDeregistered)
	}

	// web-2 crashes: nothing renews or releases its registration.
	fmt.Fprintf(w, "%s: crashes (stops renewing, without deregistering)\n", web2)
	crashed := time.Now()
	keepers[1].Orphan()
	c, err = p.await(ctx, registry.ChangeRemoved, web2)
	if err != nil {
		return err
	}
	if c.Cause != registry.CauseTTL {
		return fmt.Errorf("%s removed with cause %q, want %q", web2, c.Cause, registry.CauseTTL)
	}
	fmt.Fprintf(w, "%s was removed %v after it crashed (TTL %v)\n", web2, time.Since(crashed).Round(time.Millisecond), ttl)
	if found := discover(ctx, w, reg); len(found) != 0 {
		return fmt.Errorf("discovered %d instances after both left", len(found))
	}
	return nil
}
