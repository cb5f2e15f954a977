// Package faultcheck checks a history of lease operations for safety
// violations and computes the figures of a randomized fault run. It is
// pure: no NATS, no processes, no clocks of its own. The
// fault harness logs what its holder processes send and receive, and
// what its nemesis does, in the format below; after the run it reads the
// logs with [Decode], assembles them with [NewHistory] and calls [Check].
//
// # The history
//
// One JSON object a line ([Record]), per process: an operation
// ("type":"op": who sent it, which lease, grant|renew|release|get, the
// request's D, token and revision and a grant's request id, the outcome
// code and the reply's holder, token, revision, server time, node and
// whether a grant was recovered) or a fault
// ("type":"fault": its kind; its target, a node's name or, for a holder
// fault, the holder's proc; its start and end). Every time is the
// machine's CLOCK_MONOTONIC in nanoseconds, shared by all its processes:
// an operation's t_send is read just before the request is sent and
// t_reply just after the reply arrives (or the caller gives up: code
// "no_reply"). A process may log an operation as pending (no code) before
// sending it and again when it completes, so that one killed in between
// leaves an operation without a reply, which orphan tenures need. A
// killed process may also leave its last line cut: [Decode] drops it.
// [Writer] writes records so.
//
// # The window arithmetic
//
// As in docs/safety.md ("Two clocks, asymmetric risk"): a holder that
// sent a grant or renewal at s with duration D and got it acknowledged
// holds from the reply until s + D·(1−ρ) − m_h ([Window]), and stops
// early when it sends a release or is refused. A grant sent again after
// no answer keeps its request id, and a retry answered with the tenure an
// earlier attempt made ("recovered") counts s from the send of the
// request's first attempt, which may be the one that stored it. The server keeps the key
// for ceil(D + m_g) from after s, so a correct cluster grants the lease to
// nobody else before that window ends: two windows of one lease that
// intersect are a violation however short the intersection. Give [Check]
// the holders' ρ and m_h in [Params]; a checker assuming a smaller margin
// than the holders used would report overlaps the holders never had.
//
// # What it checks
//
// [Check] reports as violations: holding windows of two tenures of a
// lease that intersect ([Overlap]); a renewal or release of an older
// tenure accepted after a newer tenure's grant was acknowledged
// ([StaleAccepted]); a token not above every token and revision
// acknowledged before its grant was sent ([TokenNotIncreasing]); one
// token granted twice ([TokenReused]); and a reply showing the lease
// older than an acknowledged grant or renewal had left it ([LostAck]).
// The order it relies on is only real time as the log proves it: an
// operation happened before another if its reply arrived before the
// other was sent. Concurrent operations are not ordered and nothing is
// required of them (a linearizable service may order them either way).
//
// The figures ([Figures]) are tenures, renewals, faults by kind,
// availability (the share of time a lease had a live holder window) over
// the run and around each kind of fault, handover times after a release,
// a crash, a pause or an abandoned tenure, renewals refused inside a live
// window and answered before the grantor could have given the tenure up
// (false losses), and orphan tenures (granted, but the reply
// reached no waiting caller), each put down to a grant request, and of
// those the ones whose caller retried and stopped on an answer to its
// last attempt (which idempotent grants are meant to prevent; see
// [Figures.RetriedOrphans], [Figures.LateOrphans]).
//
// # What it does not check
//
// It sees only what the holders logged: a grant whose reply was lost and
// whose token no later reply shows is invisible, and a violation between
// two operations that overlap in time is not one it can prove. It does
// not check effects on resources (fencing) nor liveness: a run where
// nobody ever holds a lease passes, with availability 0. Reads (a get, the
// token a held error names, the revision of a conflict) are taken as
// evidence for [LostAck] unless [Params.IgnoreReads]; kvlease's reads are
// hints that a lagging follower may serve, so a read showing an older
// tenure is a lost write only if the reads are known to be current. It
// trusts the clock: one machine's CLOCK_MONOTONIC, so histories from
// several machines cannot be merged into one.
//
// [Report.Summary] renders the figures and violations for people.
package faultcheck
