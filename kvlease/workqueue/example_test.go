package workqueue_test

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
	"github.com/leased/leased/kvlease/workqueue"
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

func ExampleQueue() {
	st, js, stop := exampleStore()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	q, err := workqueue.Open(ctx, js, st, "thumbnails")
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "img-0042", []byte("cat.png")); err != nil {
		log.Fatal(err)
	}

	// A worker claims the item: a lease "claim.thumbnails.img-0042", kept
	// renewed while it works, here with a holder margin of its own.
	c, err := q.Claim(ctx, "worker-3", 5*time.Second,
		workqueue.WithLease(kvlease.WithHolderMargin(500*time.Millisecond)))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s claimed %s (%s) with token %d\n", c.Lease().Holder(), c.Item, c.Payload, c.Token())

	// Completion is fenced at the sink: refused once a newer claim has
	// raised the item's bar.
	if err := c.Complete(ctx, []byte("cat-thumb.png")); err != nil {
		log.Fatal(err)
	}
	done, worker, _, result, err := q.Result(ctx, "img-0042")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("done:", done, "by", worker, "result", string(result))
	// Output:
	// worker-3 claimed img-0042 (cat.png) with token 1
	// done: true by worker-3 result cat-thumb.png
}
