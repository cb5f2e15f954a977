package kvleasetest

import (
	"context"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// StartStore is [NewStore] outside a test (in an Example, which has no
// testing.TB): it starts a server in a new temporary directory, connects to
// it and opens the lease bucket with opts, as kvlease's ExampleOpen does
// step by step. stop closes the connection, shuts the server down and
// removes the directory; on error, StartStore has already undone what it
// started.
func StartStore(opts ...kvlease.Option) (st *kvlease.Store, js jetstream.JetStream, stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
			st, js, stop = nil, nil, nil
		}
	}()
	dir, err := os.MkdirTemp("", "kvlease-example-")
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, func() { os.RemoveAll(dir) })
	srv, err := Start(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, srv.Shutdown)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, nc.Close)
	if js, err = jetstream.New(nc); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if st, err = kvlease.Open(ctx, js, opts...); err != nil {
		return nil, nil, nil, err
	}
	return st, js, stop, nil
}
