package readlease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/readlease"
)

// exampleStore starts a JetStream server in a temporary directory
// and opens the lease bucket on it, as kvlease's ExampleOpen does step by step. stop
// closes the connection, shuts the server down and removes the directory.
func exampleStore() (st *kvlease.Store, js jetstream.JetStream, stop func()) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	fail := func(err error) {
		stop()
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kvlease-example-")
	if err != nil {
		log.Fatal(err)
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	srv, err := kvleasetest.Start(dir)
	if err != nil {
		fail(err)
	}
	stops = append(stops, srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fail(err)
	}
	stops = append(stops, nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err = kvlease.Open(ctx, js); err != nil {
		fail(err)
	}
	return st, js, stop
}

func ExampleRead() {
	st, _, stop := exampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := kvlease.Acquire(ctx, st, "leader.config", "node-1", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	cached := "v7" // the holder's local state
	read := func() {
		v, from, err := readlease.Read(ctx, l, 100*time.Millisecond,
			func() (string, error) { return cached, nil },
			func(context.Context) (string, error) { return "v8", nil }) // e.g. a read through the stream leader
		fmt.Println(v, from, err)
	}
	read() // held, with more than the margin left: served locally

	// Once the lease is released (or lost), reads go to the authority.
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	read()
	// Output:
	// v7 local <nil>
	// v8 authoritative <nil>
}
