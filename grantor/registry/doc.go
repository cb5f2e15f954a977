// Package registry is service registration and discovery on leases, for
// the grantor side.
//
// An instance registers as the lease "svc.<service>.<instance>" (its
// layout in [github.com/leased/leased/grantor/api]) and keeps it renewed,
// with [github.com/leased/leased/grantor/client.Register]. A [Registry]
// keeps the registrations of a bucket in memory, current by watching the
// bucket (no polling), answers [Registry.Discover] and delivers every
// addition and removal to [Registry.Watch]. Given a gossip node
// ([WithGossip]) it reports each instance's suspicion level and removes the
// registrations of nodes gossip declares dead, or that leave it, at once
// (cause "gossip"), instead of waiting for their TTL; but not while most
// other members look dead or suspect at once, which says this grantor is
// the one cut off, nor within gossip's suspicion timeout of a stall of
// this grantor, whose verdicts rest on probes no one could answer (see
// [WithGossip]).
//
// As a [grantor.Extension] ([grantor.WithExtension]) the registry serves
// svc.v1.register, svc.v1.deregister and svc.v1.discover on the lease
// service: registering is a grant with the service's limits.
//
// # What it guarantees
//
// Gossip only ever removes registrations, never other leases, and only by
// revoking them at the bucket: a gossip false positive may cost
// availability, never safety. A registration that gossip does not know
// ends by its TTL, like any lease.
//
// # What it does not do
//
// Discovery is a view, not the truth: it lags the bucket by the stream's
// delivery, and, while its watch is cut off from the server, by the cut
// (a warning says so; see [Registry.Discover]); suspicion levels are this
// grantor node's opinion. It does
// not health-check instances itself. This is the only library package that
// imports [github.com/leased/leased/membership].
package registry
