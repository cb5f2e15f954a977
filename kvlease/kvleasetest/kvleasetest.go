// Package kvleasetest provides helpers for tests that need a real JetStream
// server: a single-node server or a cluster in t.TempDir(), connections, a
// lease store on it, and a TCP proxy that can cut a client off. Everything
// started here stops in t.Cleanup. For tests of holders that need no server,
// [FakeGrantor] is an in-memory [kvlease.Grantor] that runs on a
// testing/synctest bubble's clock.
//
// It runs nats-server itself (github.com/nats-io/nats-server/v2) rather than
// through grantor/embedded, so that kvlease's tests, and every package's
// below the grantor, need nothing from above them.
package kvleasetest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease"
)

// Connect opens a NATS connection to url that the test closes on cleanup.
// It reconnects forever, so that tests see faults as timeouts, not as a
// closed connection.
func Connect(tb testing.TB, url string, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		tb.Fatalf("kvleasetest: connect %s: %v", url, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on nc.
func JetStream(tb testing.TB, nc *nats.Conn) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("kvleasetest: jetstream: %v", err)
	}
	return js
}

// OpenStore opens the lease bucket through a new connection to url.
func OpenStore(tb testing.TB, url string, opts ...kvlease.Option) *kvlease.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kvlease.Open(ctx, JetStream(tb, Connect(tb, url)), opts...)
	if err != nil {
		tb.Fatalf("kvleasetest: open store: %v", err)
	}
	return st
}

// NewStore starts a server and opens a lease store on it.
func NewStore(tb testing.TB, opts ...kvlease.Option) (*Server, *kvlease.Store) {
	tb.Helper()
	s := NewServer(tb)
	return s, OpenStore(tb, s.ClientURL(), opts...)
}
