package readlease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/kvlease/readlease"
)

func ExampleRead() {
	st, _, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
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
