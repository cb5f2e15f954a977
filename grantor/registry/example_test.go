package registry_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
)

// The registry plugs into the lease service as an extension: the service
// then answers svc.v1.register, .deregister and .discover. An instance
// registers through a client and keeps its registration renewed.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "registry-example")
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
	st, err := kvlease.Open(ctx, js)
	if err != nil {
		log.Fatal(err)
	}

	// The grantor's side: a registry (here without gossip) in the service.
	reg, err := registry.New(st)
	if err != nil {
		log.Fatal(err)
	}
	svc, err := grantor.New(st, nc, grantor.DefaultConfig(), grantor.WithExtension(reg))
	if err != nil {
		log.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer svc.Stop()
	added := reg.Watch(ctx, "web")

	// The instance's side.
	c, err := client.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	k, err := client.Register(ctx, c, api.Registration{Service: "web", Instance: "i1", Addr: "10.0.0.7:8080"}, "web-i1", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close(ctx) // deregisters
	<-added            // the registry has seen it

	rep, err := c.Discover(ctx, "web", 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range rep.Instances {
		fmt.Println(in.Instance, in.Addr)
	}
	// Output: i1 10.0.0.7:8080
}
