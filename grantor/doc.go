// Package grantor is the server side of leased: the lease service on NATS
// request/reply, usable from any NATS client, and its Go client.
//
// # Service
//
// [Service] registers a NATS micro service named "leased" with endpoints
// lease.v1.grant, lease.v1.renew, lease.v1.release, lease.v1.get and
// lease.v1.list, and lease.admin.v1.revoke on a separate subject that NATS
// permissions can reserve for operators. Bodies are JSON (docs/api.md);
// errors carry a stable code in the Nats-Service-Error-Code header and in the
// body. W3C trace context rides in the request headers.
//
// A grant returns a random secret; the bucket stores only its hash, and
// renewals and releases must present it. Knowing a lease's name, holder and
// token is not enough to renew or release it.
//
// It also serves service registration (svc.v1.register, .deregister,
// .discover; see [Registry]: instances are leases, discovery reports gossip
// suspicion levels, and gossip's death verdicts remove registrations, never
// other leases), and publishes every grant and end of a tenure on
// lease.events.v1.<name> for followers in any language. It counts changes of
// holder and flags flapping leases.
//
// Requests are handled concurrently (up to [Config.MaxInFlight]), so many
// clients' KV writes overlap instead of queueing behind one round trip.
//
// # Client
//
// [Client] speaks the service API and implements [kvlease.Grantor], so
// [kvlease.Acquire] and [kvlease.Keep] work over it unchanged. It estimates
// the grantor's clock offset and rate error from every reply
// ([Client.Clock]).
//
// The subpackage [github.com/leased/leased/grantor/embedded] runs the
// embedded JetStream server that `leased serve` uses.
package grantor
