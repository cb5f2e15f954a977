// Command read-lease shows reads served under a lease.
//
// A leader keeps the configuration it wrote in memory and answers reads from
// it while its lease has the read margin left: no other leader can have been
// granted the lease, so no one else can have written. Then the leader hangs
// (it stops renewing, as in a long pause), a second leader takes over once
// the lease lapses and writes a new configuration, and the first leader,
// waking, answers the next read through the authoritative read instead of
// its stale memory. Every reply says where it was served from.
//
// Usage:
//
//	go run ./examples/read-lease [-nats-url nats://host:4222]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. It uses the buckets "read-lease" and "read-lease-config".
package main

import (
	"context"
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
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/readlease"
)

const (
	leaseD     = time.Second
	readMargin = 100 * time.Millisecond
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

// leader is one candidate with its connection, election and cached state.
type leader struct {
	name   string
	lead   *election.Leadership
	fence  *fence.KV
	cached string
}

func (l *leader) read(ctx context.Context) (string, readlease.ServedFrom, error) {
	return readlease.Read(ctx, l.lead.Lease(), readMargin,
		func() (string, error) { return l.cached, nil },
		func(ctx context.Context) (string, error) {
			v, err := l.fence.Read(ctx, "config")
			return string(v.Data), err
		})
}

func run(ctx context.Context, w io.Writer, natsURL string) error {
	// A server that never answers (one without JetStream) left it
	// waiting for good (found by an outside client).
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	join := func(name string) (_ *leader, done func(), err error) {
		nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(name))...)
		if err != nil {
			return nil, nil, err
		}
		defer func() {
			if err != nil {
				nc.Close()
			}
		}()
		js, _ := jetstream.New(nc) // fails only on a bad option
		st, err := kvlease.Open(ctx, js, kvlease.WithBucket("read-lease"), kvlease.WithGrantorMargin(0))
		if err != nil {
			return nil, nil, err
		}
		fc, err := fence.OpenKV(ctx, js, "read-lease-config")
		if err != nil {
			return nil, nil, err
		}
		e, err := election.New(st, "leader.config")
		if err != nil {
			return nil, nil, err
		}
		lead, err := e.Campaign(ctx, name, leaseD)
		if err != nil {
			return nil, nil, err
		}
		return &leader{name: name, lead: lead, fence: fc}, func() { lead.Orphan(); nc.Close() }, nil
	}

	first, done1, err := join("first")
	if err != nil {
		return err
	}
	defer done1()
	first.cached = fmt.Sprintf("config written by first (token %d)", first.lead.Token())
	if err := first.fence.Write(ctx, "config", first.lead.Token(), []byte(first.cached)); err != nil {
		return err
	}
	v, from, err := first.read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first leads (token %d); read: %q, served %s\n", first.lead.Token(), v, from)
	if from != readlease.ServedLocal {
		return fmt.Errorf("a read under a held lease was served %s", from)
	}

	// first hangs: no renewals; its lease lapses; second takes over.
	first.lead.Orphan()
	fmt.Fprintln(w, "first hangs (stops renewing)")
	second, done2, err := join("second") // blocks until the lapse
	if err != nil {
		return err
	}
	defer done2()
	second.cached = fmt.Sprintf("config written by second (token %d)", second.lead.Token())
	if err := second.fence.Write(ctx, "config", second.lead.Token(), []byte(second.cached)); err != nil {
		return err
	}
	fmt.Fprintf(w, "second leads (token %d) and writes a new configuration\n", second.lead.Token())

	// first wakes up and is asked to read.
	v, from, err = first.read(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first wakes; read: %q, served %s (its memory still says %q)\n", v, from, first.cached)
	if from != readlease.ServedAuthoritative || v != second.cached {
		return fmt.Errorf("stale read served: %q from %s", v, from)
	}
	return nil
}
