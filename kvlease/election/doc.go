// Package election is leader election on one lease, a recipe built only on
// [github.com/leased/leased/kvlease]'s exported API.
//
// The candidate that holds the election's lease leads ([Election.Campaign]
// returns its [Leadership]), with the lease's token as its fencing token.
// Candidates wait on the bucket's stream for the leader's release,
// revocation or the server's expiry marker and try at once: nothing polls,
// and a resignation ([Leadership.Resign]) hands over in one round trip.
// A candidate whose watch is cut off ([kvlease.Watcher.Interrupts]: its
// node died) tries the grant then, and every second until its watch is
// made anew, which takes seconds where that node led JetStream's meta
// group.
// [Election.Observe] reports the current leader, then every change.
//
// # What it guarantees
//
// Leadership is a kept [kvlease.Lease]: at most one candidate's holder-side
// validity window is open at a time, under the clock assumptions of
// kvlease (rates within ρ). Its Context is cancelled the moment leadership
// is lost, whether by a refused renewal, a passed deadline or Resign.
// A revocation without FreeNow keeps that promise: it holds the lease
// until the revoked leader's deadline has passed.
//
// # What it does not guarantee
//
// A leader paused between a check and its effect acts late without
// knowing: pass [Leadership.Token] with every write and let the resource
// refuse stale tokens ([github.com/leased/leased/kvlease/fence]). Observers
// learn of a change as the stream delivers it, a moment after the new
// leader does. Reads served from a leader's local state are
// [github.com/leased/leased/kvlease/readlease]'s.
//
// A revocation that frees the lease at once ([kvlease.FreeNow]: revoke
// --now) ends the leader's tenure before its deadline, and another
// candidate may lead at once: the old leader learns of it from its watch
// of the lease a moment later (its keeper renews now on the change, and
// the renewal is refused), and its window overlaps the new leader's until
// then: until its own deadline if it is cut off from the server, its
// watch interrupted and its renewals unanswered. A watch interrupted
// while the server still answers (it lost its consumer, and making
// another waits for a new meta leader) makes it renew at once and every
// second until the watch is back: it learns of the revocation then.
// Use FreeNow only for a
// leader known to be gone, or a resource that checks tokens.
//
// # Options
//
// [Election.Campaign] takes [kvlease.WithLease] (the options of [kvlease.Acquire]:
// a holder margin, a clock guard) and [kvlease.WithKeeper] (those of
// [kvlease.Keep]). Both refuse nil options.
package election
