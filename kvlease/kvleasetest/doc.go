// Package kvleasetest provides helpers for tests that need a real JetStream
// server, in the manner of net/http/httptest: a single-node server
// ([NewServer]) or a cluster ([NewCluster]) in t.TempDir(), connections
// ([Connect]), a lease store on it ([OpenStore], [NewStore]), a TCP proxy
// that can cut a client off ([Proxy]), and child processes for fault tests
// that kill or stop a holder ([Main], [StartChild], [ChildStore]). For tests
// of holders that need no server, [FakeGrantor] is an in-memory
// [kvlease.Grantor] that runs on a testing/synctest bubble's clock.
//
// # What it guarantees
//
// Everything started with a testing.TB stops in its t.Cleanup: servers
// shut down, connections and proxies close, children are killed and
// waited for. Servers listen on 127.0.0.1, on free ports unless
// [WithPort] says otherwise, and sync every write before acknowledging
// it, as a lease store must, unless [WithUnsafeSync] (for benchmarks).
// Connections reconnect forever, so that a test sees a fault as a timeout
// rather than as a closed connection.
//
// # What it does not do
//
// A test server has no authorization, no lock on its data directory and
// no configuration file: programs run
// [github.com/leased/leased/grantor/embedded] instead. [Start] serves
// Examples, which have no testing.TB: its caller shuts the server down.
// [NewCluster] does not wait for the cluster to elect its leaders.
//
// It runs nats-server itself (github.com/nats-io/nats-server/v2) rather
// than through grantor/embedded, so that kvlease's tests, and every
// package's below the grantor, need nothing from above them.
package kvleasetest
