package election_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
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

func ExampleElection() {
	store, _, stop := exampleStore()
	defer stop()
	ctx := context.Background()

	e, err := election.New(store, "leader.billing")
	if err != nil {
		fmt.Println(err)
		return
	}
	lead, err := e.Campaign(ctx, "node-1", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	cur, _ := e.Leader(ctx)
	fmt.Println("leader:", cur.Holder, "token:", lead.Token())

	// A second candidate waits for the first to resign.
	next := make(chan *election.Leadership)
	go func() {
		l, _ := e.Campaign(ctx, "node-2", 10*time.Second)
		next <- l
	}()
	_ = lead.Resign(ctx)
	second := <-next
	cur, _ = e.Leader(ctx)
	fmt.Println("leader:", cur.Holder, "higher token:", second.Token() > lead.Token())
	_ = second.Resign(ctx)
	// Output:
	// leader: node-1 token: 1
	// leader: node-2 higher token: true
}
