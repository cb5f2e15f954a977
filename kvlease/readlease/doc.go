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
// so no other holder can have written since this one last did. A lease
// whose renewal was refused, or that was released, serves authoritatively
// at once, whatever its old deadline.
//
// # What it does not guarantee
//
// A revocation that frees the lease at once ([kvlease.FreeNow]: revoke
// --now, the registry's gossip removal) ends the tenure before its
// deadline, and another holder may be granted the lease at once: this
// holder serves locally until it learns of it, at its next renewal, or at
// once if its keeper hears the lease's changes ([kvlease.WithRenewNow]; an
// election leader's does). Keep such revocations for holders that are
// gone, or feed the keeper a watch of the lease. A revocation without
// FreeNow holds the lease until this holder's deadline has passed: no one
// else is granted it meanwhile.
//
// The margin must cover the time from the second check to the reply
// reaching the client. A pause of the process between the check and the
// reply is not covered by any margin: a client that cannot accept a read
// that old must read authoritatively. Writes still need a fence
// ([github.com/leased/leased/kvlease/fence]).
package readlease
