package workqueue_test

import (
	"context"
	"errors"
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

// An item that no claim completes (a payload that crashes every worker
// that takes it) is given up after as many claims as WithMaxClaims allows,
// as a dead-letter queue would: its payload is kept at the sink.
func ExampleWithMaxClaims() {
	st, js, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	q, err := workqueue.Open(ctx, js, st, "imports", workqueue.WithMaxClaims(1))
	if err != nil {
		log.Fatal(err)
	}
	defer q.Close()
	if err := q.Add(ctx, "row-7", []byte("malformed")); err != nil {
		log.Fatal(err)
	}
	c, err := q.Claim(ctx, "worker-1", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Close(ctx) // the worker failed on it and gave it back

	// The next Claim gives the item up instead of claiming it, and waits
	// for another item.
	wctx, wcancel := context.WithTimeout(ctx, time.Second)
	defer wcancel()
	_, err = q.Claim(wctx, "worker-2", 5*time.Second)
	fmt.Println("claim:", err)

	_, _, _, _, err = q.Result(ctx, "row-7")
	var gaveUp *workqueue.GaveUpError
	if errors.As(err, &gaveUp) {
		fmt.Printf("%s given up after %d claim(s), payload %q\n", gaveUp.Item, gaveUp.Claims, gaveUp.Payload)
	}
	fmt.Println("refused again:", errors.Is(q.Add(ctx, "row-7", nil), workqueue.ErrGaveUp))
	// Output:
	// claim: context deadline exceeded
	// row-7 given up after 1 claim(s), payload "malformed"
	// refused again: true
}
