package workqueue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/workqueue"
)

func ExampleQueue() {
	st, js, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
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
		kvlease.WithLease(kvlease.WithHolderMargin(500*time.Millisecond)))
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
