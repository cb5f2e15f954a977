package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func ExampleOpen() {
	// A single-node JetStream server in this process; in production,
	// connect to your NATS cluster instead.
	dir, err := os.MkdirTemp("", "kvlease-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := kvleasetest.Start(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()

	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvlease.Open(ctx, js) // creates the "leases" bucket if missing
	if err != nil {
		log.Fatal(err)
	}

	// The grantor side: a 5 s lease is stored with a TTL of D plus the
	// grantor margin, rounded up to whole seconds.
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: "leader", Holder: "node-1", Duration: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("bucket:", st.Bucket())
	fmt.Printf("granted %q to %s: token %d, server TTL %v\n", rec.Name, rec.Holder, rec.Token, rec.TTL)
	// Output:
	// bucket: leases
	// granted "leader" to node-1: token 1, server TTL 6s
}

func ExampleAcquire() {
	st, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()

	l, err := kvlease.Acquire(ctx, st, "leader", "node-1", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Check(); err != nil { // immediately before every effect
		log.Fatal(err)
	}
	fmt.Printf("%s holds %q with token %d\n", l.Holder(), l.Name(), l.Token())

	// Nobody else is granted the lease while it is held.
	_, err = kvlease.Acquire(ctx, st, "leader", "node-2", 5*time.Second)
	var held *kvlease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("node-2 refused: held by %s (token %d)\n", held.Holder, held.Token)
	}

	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// A released lease no longer authorizes anything.
	fmt.Println("expired after release:", errors.Is(l.Check(), kvlease.ErrExpired))
	// Output:
	// node-1 holds "leader" with token 1
	// node-2 refused: held by node-1 (token 1)
	// expired after release: true
}

// A grant whose reply was lost is sent again with the same request ID and
// secret: the retry gets the tenure the first attempt made. Acquire does
// this by itself; this is what it does, for callers of Grant.
func ExampleStore_Grant_retry() {
	st, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()

	id, secret := kvlease.NewRequestID() // one pair per request, kept for its retries
	req := kvlease.GrantRequest{Name: "job.42", Holder: "worker-3", Duration: 10 * time.Second, RequestID: id, Secret: secret}
	first, err := st.Grant(ctx, req) // suppose this reply never arrived
	if err != nil {
		log.Fatal(err)
	}
	again, err := st.Grant(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("retry: token %d (first %d), recovered %v\n", again.Token, first.Token, again.Recovered)

	// Without the secret the request ID proves nothing.
	_, other := kvlease.NewRequestID()
	_, err = st.Grant(ctx, kvlease.GrantRequest{Name: "job.42", Holder: "worker-3", Duration: 10 * time.Second, RequestID: id, Secret: other})
	fmt.Println("another secret is refused as held:", errors.Is(err, kvlease.ErrHeld))

	// Once its tenure has ended, the request grants nothing again.
	_ = st.Release(ctx, kvlease.ReleaseRequest{Name: "job.42", Holder: "worker-3", Token: again.Token, Revision: again.Revision, Secret: secret})
	_, err = st.Grant(ctx, req)
	fmt.Println("after release:", errors.Is(err, kvlease.ErrRequestUsed))
	// Output:
	// retry: token 1 (first 1), recovered true
	// another secret is refused as held: true
	// after release: true
}

func ExampleKeep() {
	st, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx := context.Background()

	l, err := kvlease.Acquire(ctx, st, "compactor", "node-1", 3*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// The keeper renews every D/3 until it is closed or the lease is lost.
	// ctx must outlive the tenure: when it ends, the keeper releases.
	k, err := kvlease.Keep(ctx, l)
	if err != nil {
		log.Fatal(err)
	}

	var fc fence.Mem // stands in for the protected resource
work:
	for _, segment := range []string{"seg-1", "seg-2", "seg-3"} {
		select {
		case <-k.Context().Done(): // lost: stop working at once
			fmt.Println("lost:", context.Cause(k.Context()))
			break work
		default:
		}
		if err := l.Check(); err != nil { // before each effect, not once per loop
			fmt.Println("stop:", err)
			break work
		}
		err := fc.Do("segments", l.Token(), func() error {
			fmt.Printf("compacted %s with token %d\n", segment, l.Token())
			return nil
		})
		if err != nil {
			fmt.Println("refused:", err)
			break work
		}
	}

	// Close stops renewing and releases the lease (if it is still ours).
	if err := k.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("keeper:", k.Err())
	fmt.Println("context cancelled:", k.Context().Err() != nil)
	// Output:
	// compacted seg-1 with token 1
	// compacted seg-2 with token 1
	// compacted seg-3 with token 1
	// keeper: kvlease: closed
	// context cancelled: true
}

func ExampleStore_Watch() {
	st, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	w, err := st.Watch(ctx, "jobs.")
	if err != nil {
		log.Fatal(err)
	}
	defer w.Stop()
	<-w.Synced() // the current state has been delivered (here: nothing)

	// The bucket keeps one message per lease, so a watcher that falls
	// behind sees only the latest change of each: here each step waits for
	// its event before the next.
	next := func() {
		ev := <-w.Events()
		fmt.Println(ev.Type, ev.Name, ev.Holder, ev.Token)
	}
	l, err := kvlease.Acquire(ctx, st, "jobs.nightly", "worker-1", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	next()
	if err := l.Renew(ctx); err != nil {
		log.Fatal(err)
	}
	next()
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	next()
	// Output:
	// granted jobs.nightly worker-1 1
	// renewed jobs.nightly worker-1 1
	// released jobs.nightly worker-1 1
}
