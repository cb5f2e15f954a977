// Command fenced-writes shows why a lease needs a fence.
//
// Two holders share one process. Holder A takes the lease "ledger" for 2 s
// and writes through a [fence.KV] with its token. Then A checks its
// lease, finds it valid, and pauses before its next write, as a process does
// in a long GC pause or a VM migration: it stops renewing and sleeps past
// its deadline. The server lapses A's lease; holder B, watching, sees the
// expiry, takes the lease with a higher token and writes. When A wakes it
// goes ahead with the write its check allowed, and the fence refuses A's
// old token. B's value stands.
//
// Usage:
//
//	go run ./examples/fenced-writes [-nats-url nats://host:4222]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. It uses the buckets "fenced-writes" (leases)
// and "fenced-writes-data" (the fenced resource).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
)

const (
	leaseBucket = "fenced-writes"
	fenceBucket = "fenced-writes-data"
	leaseName   = "ledger"
	resource    = "ledger"
	leaseD      = 2 * time.Second

	valueA     = "balance=100 (written by A)"
	valueLateA = "balance=90 (written by A after its pause)"
	valueB     = "balance=250 (written by B)"
)

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.WithServer(*natsURL, func(url string) error { return run(ctx, os.Stdout, url) }); err != nil {
		log.Fatal(err)
	}
}

// holder is one lease holder with its own connection, as if it were its own
// process.
type holder struct {
	name  string
	nc    *nats.Conn
	store *kvlease.Store
	fence *fence.KV
}

func connect(ctx context.Context, name, natsURL string) (*holder, error) {
	nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(name))...)
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc) // fails only on a bad option
	st, err := kvlease.Open(ctx, js, kvlease.WithBucket(leaseBucket))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("holder %s: %w", name, err)
	}
	fc, err := fence.OpenKV(ctx, js, fenceBucket)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("holder %s: %w", name, err)
	}
	return &holder{name: name, nc: nc, store: st, fence: fc}, nil
}

// run tells the story against the NATS server at natsURL, writing it to w.
// It returns an error if any step does not go as told, in particular if the
// fence accepts A's late write.
func run(ctx context.Context, w io.Writer, natsURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	say := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }

	a, err := connect(ctx, "A", natsURL)
	if err != nil {
		return err
	}
	defer a.nc.Close()
	b, err := connect(ctx, "B", natsURL)
	if err != nil {
		return err
	}
	defer b.nc.Close()

	// B watches the lease from the start, so it sees A's tenure end.
	watch, err := b.store.Watch(ctx, leaseName)
	if err != nil {
		return err
	}
	defer watch.Stop()

	// A takes the lease, keeps it renewed, and writes with its token.
	leaseA, err := kvlease.Acquire(ctx, a.store, leaseName, a.name, leaseD)
	if err != nil {
		return fmt.Errorf("A: acquire: %w", err)
	}
	keeperA, err := kvlease.Keep(ctx, leaseA)
	if err != nil {
		return err
	}
	defer keeperA.Orphan() // on early returns; a no-op after the pause below
	say("A: acquired %q for %v with token %d", leaseName, leaseD, leaseA.Token())
	if err := leaseA.Check(); err != nil {
		return fmt.Errorf("A: %w", err)
	}
	if err := a.fence.Write(ctx, resource, leaseA.Token(), []byte(valueA)); err != nil {
		return fmt.Errorf("A: write: %w", err)
	}
	say("A: wrote %q with token %d", valueA, leaseA.Token())

	// A checks before its next write, and is then paused before the write
	// goes out: its keeper stops renewing and it sleeps past its deadline.
	if err := leaseA.Check(); err != nil {
		return fmt.Errorf("A: %w", err)
	}
	say("A: lease checked, %v left; pausing before the write (think GC pause or VM migration)",
		leaseA.Remaining().Round(100*time.Millisecond))
	keeperA.Orphan()
	select {
	case <-time.After(time.Until(leaseA.Deadline()) + 100*time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	say("A: (still paused) its deadline has passed")

	// B sees the server lapse A's tenure, then takes the lease.
	ev, err := awaitExpiry(ctx, watch, leaseA.Token())
	if err != nil {
		return fmt.Errorf("B: %w", err)
	}
	say("B: saw %q %s (holder %s, token %d)", ev.Name, ev.Type, ev.Holder, ev.Token)
	leaseB, err := kvlease.Acquire(ctx, b.store, leaseName, b.name, leaseD)
	if err != nil {
		return fmt.Errorf("B: acquire: %w", err)
	}
	keeperB, err := kvlease.Keep(ctx, leaseB)
	if err != nil {
		return err
	}
	defer keeperB.Orphan() // on early returns the lease lapses; Close below releases it
	say("B: acquired %q with token %d", leaseName, leaseB.Token())
	if err := leaseB.Check(); err != nil {
		return fmt.Errorf("B: %w", err)
	}
	if err := b.fence.Write(ctx, resource, leaseB.Token(), []byte(valueB)); err != nil {
		return fmt.Errorf("B: write: %w", err)
	}
	say("B: wrote %q with token %d", valueB, leaseB.Token())

	// A wakes and makes the write it had checked for, with its old token.
	say("A: wakes up and writes %q with token %d", valueLateA, leaseA.Token())
	err = a.fence.Write(ctx, resource, leaseA.Token(), []byte(valueLateA))
	var stale *fence.StaleTokenError
	switch {
	case errors.As(err, &stale):
		say("A: write refused by the fence: token %d is stale, %d already accepted", stale.Token, stale.Highest)
	case err == nil:
		return errors.New("the fence accepted A's stale token")
	default:
		return fmt.Errorf("A: late write: %w", err)
	}
	if errors.Is(leaseA.Check(), kvlease.ErrExpired) {
		say("A: (its Check would now fail too, but it had checked before the pause: only the fence could stop it)")
	}

	v, err := b.fence.Read(ctx, resource)
	if err != nil {
		return err
	}
	say("%s = %q (token %d)", resource, v.Data, v.Token)
	if v.Token != leaseB.Token() {
		return fmt.Errorf("final value has token %d, want B's %d", v.Token, leaseB.Token())
	}
	if err := keeperB.Close(ctx); err != nil {
		return fmt.Errorf("B: release: %w", err)
	}
	say("B: released %q", leaseName)
	return nil
}

// awaitExpiry waits for the server to lapse the tenure with token.
func awaitExpiry(ctx context.Context, w *kvlease.Watcher, token kvlease.Token) (kvlease.Event, error) {
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return kvlease.Event{}, fmt.Errorf("watch ended: %v", w.Err())
			}
			if ev.Name == leaseName && ev.Token == token && ev.Type.Ends() {
				if ev.Type != kvlease.EventExpired {
					return ev, fmt.Errorf("tenure %d ended by %s, not by expiry", token, ev.Type)
				}
				return ev, nil
			}
		case <-ctx.Done():
			return kvlease.Event{}, fmt.Errorf("waiting for %q to expire: %w", leaseName, ctx.Err())
		}
	}
}
