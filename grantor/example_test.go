package grantor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/kvlease"
)

// A grantor node serves a lease bucket on NATS; any NATS client can then
// ask it for leases, and a Go program does so through package client.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "grantor-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(embedded.Config{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect()
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	// The service on a store: the store sets the durations a lease may
	// have and the grantor margin, the config the rest of the policy.
	st, err := kvlease.Open(ctx, js, kvlease.WithDurationRange(time.Second, time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	svc, err := grantor.New(st, nc, grantor.DefaultConfig())
	if err != nil {
		log.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer svc.Stop()

	// A holder, through the service.
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	l, err := kvlease.Acquire(ctx, c, "jobs.nightly", "worker-7", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held by", l.Record().Holder)
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: held by worker-7
}
