// Package grantor is the lease service of leased: it serves a
// [kvlease.Store] on NATS request/reply, usable from any NATS client.
//
// # Service
//
// [Service] registers a NATS micro service named "leased" with endpoints
// lease.v1.grant, lease.v1.renew, lease.v1.release, lease.v1.get and
// lease.v1.list, and lease.admin.v1.revoke on a separate subject that NATS
// permissions can reserve for operators. Bodies are JSON, their types in
// [github.com/leased/leased/grantor/api] (docs/api.md); errors carry a
// stable code in the Nats-Service-Error-Code header and in the body. W3C
// trace context rides in the request headers.
//
// A grant returns a secret (random, or the caller's own); the bucket
// stores only its hash, and renewals and releases must present it. Knowing
// a lease's name, holder and token is not enough to renew or release it. A
// grant with a request_id and its secret may be sent again when its reply
// is lost, and is answered with the tenure the first attempt made.
// Requests are handled concurrently (up to [Config.MaxInFlight]), so many
// clients' KV writes overlap instead of queueing behind one round trip.
//
// # The observer
//
// One service of a cluster at a time observes the bucket, elected on the
// lease [ObserverLease] and replaced within about [ObserverDuration] when
// it dies: it publishes every grant and end of a tenure on
// lease.events.v1.<name> for followers in any language, records the
// ownership-change spans and change metrics, flags flapping leases, and
// writes the history of tenures ([github.com/leased/leased/grantor/history],
// [WithHistoryRetention]), each change once. A new observer reports the
// changes after the last one its predecessor recorded, once. It catches up
// on a watch of its own, then follows the service's own watch of the
// bucket: a node watches the bucket once.
//
// The durations a lease may have and the grantor margin are the store's,
// set once where it is opened ([kvlease.WithDurationRange],
// [kvlease.WithGrantorMargin]); [Config] holds only the service's own
// policy, and [New] refuses one its store cannot serve.
//
// # What it guarantees
//
// A reply states what the bucket decided: each verb is one [kvlease.Store]
// call, so the service, holders working on the bucket directly and any
// number of grantor nodes agree on who holds what. An error reply's code
// maps back to the same kvlease sentinel in Go
// ([github.com/leased/leased/grantor/api]), and a renewal or release
// without the grant's secret is refused.
//
// # What it does not do
//
// The service keeps no lease state of its own: the bucket is the truth, and
// every verb is one compare-and-set there (the per-holder count is a soft
// limit kept from the bucket's stream). It does not renew or release
// anything on its holders' behalf, and stopping it releases nothing. Its
// clock is not trusted for safety: holders count on their monotonic clocks
// (docs/safety.md).
//
// # Extensions
//
// Verbs beyond the lease API plug in as an [Extension], which the service
// starts, stops and routes requests to with the same limits, metrics and
// spans. Service registration ([github.com/leased/leased/grantor/registry])
// is one: `leased serve` wires it with [WithExtension]. The service itself
// imports neither the registry nor gossip.
//
// # Related packages
//
// The Go client is [github.com/leased/leased/grantor/client];
// [github.com/leased/leased/grantor/embedded] runs the embedded JetStream
// server that `leased serve` uses.
package grantor
