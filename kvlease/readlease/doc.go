// Package readlease serves reads from a lease holder's local state while
// its lease is safely held, and through an authoritative read otherwise: the
// read lease of a leader (see [github.com/leased/leased/kvlease/election]),
// or of any holder of a [kvlease.Lease].
//
// # What it guarantees
//
// [Read] serves from local state only if the lease has at least the read
// margin left before the holder's deadline, checked before and again after
// reading local state. No other holder can be granted the lease before
// that deadline (t0 + D·(1−ρ) − m_h, with the lease's clock-rate bound ρ),
// so no other holder of a later tenure can write meanwhile. A lease
// whose renewal was refused, or that was released, serves authoritatively
// at once, whatever its old deadline.
//
// # Local state: load it after raising the fence
//
// An earlier holder is not stopped by this holder's lease: paused past
// its own with a checked write in hand, it lands that write at the
// resource whenever it wakes, and a fence refuses it only once a newer
// token has reached the fence. Local state is current only if it was
// loaded, or written, in this tenure after this tenure's token reached
// the resource's fence: raise the fence as the tenure begins
// ([github.com/leased/leased/kvlease/fence.KV.Raise], or
// [github.com/leased/leased/kvlease/fence.SQL.Check] committed in a
// transaction of its own), then load the state. Loaded first, a write of
// the earlier holder could land after the load, and Read served the old
// state locally until the lease ended (found in review). Reload it in
// every tenure: state kept from an earlier tenure of the same process
// misses what other holders wrote in between.
//
// # What it does not guarantee
//
// A revocation that frees the lease at once ([kvlease.FreeNow]: revoke
// --now, the registry's gossip removal) ends the tenure before its
// deadline, and another holder may be granted the lease at once: this
// holder serves locally until it learns of it, at its next renewal, or at
// once if its keeper hears the lease's changes ([kvlease.WithRenewNow]; an
// election leader's does). A holder cut off from the server (its
// connection blackholed) hears of it neither way, its watch interrupted
// and its renewals unanswered: it serves locally until its own deadline
// (an outside client measured a leader of a 6 s lease, cut off as it was
// revoked with FreeNow, serving locally for 5.3 s while the next leader
// had led since 10 ms after the revocation). Keep such revocations for
// holders that are gone, or feed the keeper a watch of the lease. A
// revocation without
// FreeNow holds the lease until this holder's deadline has passed: no one
// else is granted it meanwhile.
//
// The margin must cover the time from the second check to the reply
// reaching the client. A pause of the process between the check and the
// reply is not covered by any margin: a client that cannot accept a read
// that old must read authoritatively. Writes still need a fence
// ([github.com/leased/leased/kvlease/fence]).
package readlease
