package kvleasetest

import (
	"context"
	"os"
	"strconv"
	"strings"
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

// Subscribe subscribes handler to subject on nc until the test ends, and
// flushes, so that the server has the subscription before anything the
// test then sends on another connection (without it a request can find
// no responders).
func Subscribe(tb testing.TB, nc *nats.Conn, subject string, handler nats.MsgHandler) {
	tb.Helper()
	sub, err := nc.Subscribe(subject, handler)
	if err != nil {
		tb.Fatalf("kvleasetest: subscribe %s: %v", subject, err)
	}
	tb.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		tb.Fatalf("kvleasetest: subscribe %s: %v", subject, err)
	}
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
	return OpenStoreOn(tb, Connect(tb, url), opts...)
}

// OpenStoreOn opens the lease bucket through nc. On a cluster that
// [NewCluster] has just started, Open waits for it to elect its leaders
// (about 2 s here: its first request goes unanswered), and under CI's load
// that took more than 10 s (TestObserverCampaignBacksOff failed so); the
// bound is that of TestOpenWhileClusterForms, and Open returns as soon as
// the bucket answers.
func OpenStoreOn(tb testing.TB, nc *nats.Conn, opts ...kvlease.Option) *kvlease.Store {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), openStoreTimeout)
	defer cancel()
	st, err := kvlease.Open(ctx, JetStream(tb, nc), opts...)
	if err != nil {
		tb.Fatalf("kvleasetest: open store: %v", err)
	}
	return st
}

const openStoreTimeout = 45 * time.Second

// NewStore starts a server and opens a lease store on it.
func NewStore(tb testing.TB, opts ...kvlease.Option) (*Server, *kvlease.Store) {
	tb.Helper()
	s := NewServer(tb)
	return s, OpenStore(tb, s.ClientURL(), opts...)
}

// BenchBatchLimits reads LEASED_BENCH_BATCH ("min,inflight[,linger]": the
// break-even, writes in flight and linger), for benchmarks to measure other
// group-commit limits than the defaults for the replica count. It reports
// false if the variable is unset, and panics if it does not parse.
func BenchBatchLimits(replicas int) (kvlease.BatchLimits, bool) {
	v := os.Getenv("LEASED_BENCH_BATCH")
	if v == "" {
		return kvlease.BatchLimits{}, false
	}
	l := kvlease.DefaultBatchLimits(replicas)
	f := strings.Split(v+",", ",")
	var err error
	if l.MinMessages, err = strconv.Atoi(f[0]); err == nil {
		l.MaxInFlight, err = strconv.Atoi(f[1])
	}
	if err == nil && f[2] != "" {
		l.Linger, err = time.ParseDuration(f[2])
	}
	if err != nil {
		panic("LEASED_BENCH_BATCH: " + err.Error())
	}
	return l, true
}

// ConsumerDeletions returns the names of the consumers of stream the
// server deletes from now on, from its JetStream advisories, as they come.
func ConsumerDeletions(tb testing.TB, nc *nats.Conn, stream string) <-chan string {
	tb.Helper()
	prefix := "$JS.EVENT.ADVISORY.CONSUMER.DELETED." + stream + "."
	out := make(chan string, 1024)
	Subscribe(tb, nc, prefix+"*", func(m *nats.Msg) {
		select {
		case out <- strings.TrimPrefix(m.Subject, prefix):
		default:
		}
	})
	return out
}

// ConsumerNames returns the names of stream's consumers now.
func ConsumerNames(tb testing.TB, js jetstream.JetStream, stream string) []string {
	tb.Helper()
	st, err := js.Stream(tb.Context(), stream)
	if err != nil {
		tb.Fatalf("kvleasetest: stream %s: %v", stream, err)
	}
	lister := st.ConsumerNames(tb.Context())
	var names []string
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		tb.Fatalf("kvleasetest: consumers of %s: %v", stream, err)
	}
	return names
}
