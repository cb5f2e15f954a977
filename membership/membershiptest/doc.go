// Package membershiptest starts in-process membership clusters for tests,
// in the manner of net/http/httptest.
//
// Nodes use [membership.TestConfig]: 127.0.0.1, a free port each, 100 ms
// probes and heartbeats. A killed node is declared dead within about 1–1.5 s
// and a silent one is suspect after about 0.4 s. Those timeouts are tight:
// on a loaded machine (load 15 on two cores, under the race detector) they
// also declare live nodes dead. A test whose point is which node gossip
// declares dead uses [ClusterLAN] (memberlist's own timing, about 5 s to a
// verdict) and waits longer for it.
//
// # What it guarantees
//
// [Cluster] returns only once every node has seen every other join and
// heard its heartbeat, so a test starts from a converged cluster. Nodes
// shut down in t.Cleanup. Every wait is bounded ([Timeout], or the timeout
// given to [WaitFor]) and fails the test when it runs out.
//
// # What it does not do
//
// The timings above are for a quiet machine: under load gossip converges
// later, so tests should wait for events rather than sleep. The nodes are
// real memberlist nodes on the loopback interface; nothing here simulates
// a network partition.
package membershiptest
