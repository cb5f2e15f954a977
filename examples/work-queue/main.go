// Command work-queue shows a work queue whose items are claimed under leases.
//
// It puts 50 items on the queue "thumbnails" and starts three workers, each
// with its own NATS connection as if it were its own process. A worker claims
// a pending item (a lease on it), makes the thumbnail (a short sleep), and
// completes the item with its claim's token. One worker crashes midway: it
// stops renewing the claim it holds and exits without completing or
// releasing it. The claim lapses after its duration, the other workers see
// the lapse on the stream, and one of them redoes the item. At the end every
// item's record at the queue's fenced sink says it was done exactly once.
//
// Usage:
//
//	go run ./examples/work-queue [-nats-url nats://host:4222]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. It uses the lease bucket "work-queue" and the
// queue's buckets "thumbnails-items" and "thumbnails-done", and deletes the
// queue's buckets first, so that a second run starts from an empty queue.
//
// Claims last 1 s and the store adds no grantor margin, so that the crashed
// worker's claim lapses in about a second. In production keep the default
// grantor margin: it absorbs forward steps of the server's clock.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/workqueue"
)

const (
	leaseBucket = "work-queue"
	queueName   = "thumbnails"
	numItems    = 50
	claimD      = time.Second
	crasher     = "w3" // the worker that crashes …
	crashAfter  = 3    // … holding the claim after its third completed item
)

var workers = []string{"w1", "w2", crasher}

// itemID names the i-th item (from 1).
func itemID(i int) string { return fmt.Sprintf("img-%03d", i) }

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := demo.WithServer(*natsURL, func(url string) error { return run(ctx, os.Stdout, url) }); err != nil {
		log.Fatal(err)
	}
}

// conn is one participant's connection, lease store and queue handle.
type conn struct {
	nc *nats.Conn
	js jetstream.JetStream
	q  *workqueue.Queue
}

func (c *conn) close() {
	if c.q != nil {
		c.q.Close()
	}
	c.nc.Close()
}

func connect(who, natsURL string) (*conn, error) {
	nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(who))...)
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc) // fails only on a bad option
	return &conn{nc: nc, js: js}, nil
}

// open opens the lease store and the queue on c.
func (c *conn) open(ctx context.Context, who string) error {
	st, err := kvlease.Open(ctx, c.js, kvlease.WithBucket(leaseBucket), kvlease.WithGrantorMargin(0))
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	if c.q, err = workqueue.Open(ctx, c.js, st, queueName); err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	return nil
}

// crash records the claim the crashing worker abandoned.
type crash struct {
	item  string
	token kvlease.Token
	at    time.Time
}

// floor is what the workers share: the narrative, who completed what, and
// the crash.
type floor struct {
	w      io.Writer
	finish context.CancelFunc // called once every item is completed

	mu          sync.Mutex
	completedBy map[string]string // item → worker whose Complete succeeded
	crashed     *crash
	err         error // an item completed twice (never expected)
}

func (f *floor) say(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.w, format+"\n", args...)
}

// completed records that worker completed item, and ends the work when all
// items are done.
func (f *floor) completed(worker, item string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if prev, dup := f.completedBy[item]; dup && f.err == nil {
		f.err = fmt.Errorf("%s completed twice, by %s and %s", item, prev, worker)
	}
	f.completedBy[item] = worker
	if len(f.completedBy) == numItems {
		f.finish()
	}
}

// abandoned returns the crashed claim if item is its item.
func (f *floor) abandoned(item string) *crash {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.crashed != nil && f.crashed.item == item {
		return f.crashed
	}
	return nil
}

// work is one worker's loop: claim, make the thumbnail, complete. It ends
// when ctx does (all items are done), or, for the crasher, when it crashes.
func (f *floor) work(ctx context.Context, name, natsURL string) error {
	c, err := connect(name, natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	if err := c.open(ctx, name); err != nil {
		return err
	}
	done := 0
	for {
		cl, err := c.q.Claim(ctx, name, claimD)
		if err != nil {
			if ctx.Err() != nil {
				return nil // every item is done
			}
			return fmt.Errorf("%s: claim: %w", name, err)
		}
		if cr := f.abandoned(cl.Item); cr != nil {
			f.say("%s: claimed %s (token %d), %v after %s crashed holding it (token %d)",
				name, cl.Item, cl.Token(), time.Since(cr.at).Round(time.Millisecond), crasher, cr.token)
		}
		if name == crasher && done == crashAfter {
			// The worker dies mid-item: nothing completes or releases its
			// claim, which lapses at the server after its duration.
			cl.Orphan()
			f.mu.Lock()
			f.crashed = &crash{item: cl.Item, token: cl.Token(), at: time.Now()}
			f.mu.Unlock()
			f.say("%s: crashes while making the thumbnail of %s (claim token %d), after %d items",
				name, cl.Item, cl.Token(), done)
			return nil
		}

		select { // make the thumbnail
		case <-time.After(time.Duration(10+rand.IntN(30)) * time.Millisecond):
		case <-ctx.Done():
			_ = cl.Close(context.WithoutCancel(ctx)) // release: someone else may redo it
			return nil
		}
		result := fmt.Sprintf("thumbs/%s-128.jpg", cl.Item)
		// Complete may be called again after an error: an unanswered one
		// (a cluster electing a leader) is tried again while ctx allows.
		_, err = kvlease.RetryUnavailable(ctx, time.Second, nil, func() (struct{}, error) {
			return struct{}{}, cl.Complete(ctx, []byte(result))
		})
		switch {
		case err == nil:
			done++
			f.completed(name, cl.Item)
		case errors.Is(err, kvlease.ErrExpired), errors.Is(err, fence.ErrStaleToken), errors.Is(err, workqueue.ErrDone):
			// The claim lapsed or was superseded: the item is (or will be)
			// done under a newer claim. Nothing was written.
			f.say("%s: completion of %s refused: %v", name, cl.Item, err)
		default:
			return fmt.Errorf("%s: complete %s: %w", name, cl.Item, err)
		}
	}
}

// run tells the story against the NATS server at natsURL, writing it to w.
// It returns an error unless every item ends up done exactly once.
func run(ctx context.Context, w io.Writer, natsURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	c, err := connect("main", natsURL)
	if err != nil {
		return err
	}
	defer c.close()
	// Start from an empty queue: remove what an earlier run left.
	for _, b := range []string{queueName + "-items", queueName + "-done"} {
		switch err := c.js.DeleteKeyValue(ctx, b); {
		case err == nil:
			fmt.Fprintf(w, "deleted the bucket %q of an earlier run\n", b)
		case !errors.Is(err, jetstream.ErrBucketNotFound):
			return fmt.Errorf("delete %s: %w", b, err)
		}
	}
	if err := c.open(ctx, "main"); err != nil {
		return err
	}
	for i := 1; i <= numItems; i++ {
		if err := c.q.Add(ctx, itemID(i), []byte("uploads/"+itemID(i)+".jpg")); err != nil {
			return fmt.Errorf("add %s: %w", itemID(i), err)
		}
	}
	fmt.Fprintf(w, "added %d items to the queue %q; workers %s start (claims last %v)\n",
		numItems, queueName, strings.Join(workers, ", "), claimD)

	wctx, finish := context.WithCancel(ctx)
	defer finish()
	f := &floor{w: w, finish: finish, completedBy: map[string]string{}}
	started := time.Now()
	errs := make(chan error, len(workers))
	for _, name := range workers {
		go func() { errs <- f.work(wctx, name, natsURL) }()
	}
	var firstErr error
	for range workers {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
			finish()
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if f.err != nil {
		return f.err
	}
	if len(f.completedBy) < numItems {
		return fmt.Errorf("only %d of %d items completed: %w", len(f.completedBy), numItems, ctx.Err())
	}
	if f.crashed == nil {
		return fmt.Errorf("%s never crashed", crasher)
	}
	fmt.Fprintf(w, "all workers stopped after %v\n", time.Since(started).Round(time.Millisecond))

	// Check every item at the sink: done, by the worker whose completion
	// succeeded, and the crashed item by someone else, with a newer claim.
	counts := map[string]int{}
	for i := 1; i <= numItems; i++ {
		id := itemID(i)
		done, worker, token, result, err := c.q.Result(ctx, id)
		switch {
		case err != nil:
			return fmt.Errorf("result of %s: %w", id, err)
		case !done:
			return fmt.Errorf("%s is not done at the sink", id)
		case worker != f.completedBy[id]:
			return fmt.Errorf("%s done by %s at the sink, but %s completed it", id, worker, f.completedBy[id])
		case string(result) != fmt.Sprintf("thumbs/%s-128.jpg", id):
			return fmt.Errorf("%s has result %q", id, result)
		}
		if id == f.crashed.item {
			if worker == crasher || token <= f.crashed.token {
				return fmt.Errorf("%s, abandoned by %s with token %d, done by %s with token %d",
					id, crasher, f.crashed.token, worker, token)
			}
			fmt.Fprintf(w, "%s, abandoned by %s (token %d), was done by %s (token %d)\n",
				id, crasher, f.crashed.token, worker, token)
		}
		counts[worker]++
	}
	var per []string
	for _, name := range workers {
		s := fmt.Sprintf("%s %d", name, counts[name])
		if name == crasher {
			s += " (crashed)"
		}
		per = append(per, s)
	}
	fmt.Fprintf(w, "items done per worker: %s\n", strings.Join(per, ", "))
	fmt.Fprintf(w, "all %d items done exactly once\n", numItems)
	return nil
}
