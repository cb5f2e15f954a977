// Package kvlease implements leases on a NATS JetStream key-value bucket: a
// grant of authority that lapses on its own, with the KV revision as the
// fencing token.
//
// # What it guarantees
//
// A lease is a key in a bucket created with per-key TTLs. [Store.Grant]
// creates the key if the lease is free, with a TTL of ceil(D + grantor
// margin) whole seconds; the server deletes it when the TTL runs out, so a
// crashed, partitioned or paused holder needs to send nothing for its
// authority to end. [Store.Renew] and [Store.Release] are compare-and-set
// operations on the key's revision; every write is a JetStream publish with
// its own expected-revision check, so the server alone decides who wins a
// race.
//
// The holder keeps its own deadline, from a monotonic clock read before the
// request is sent: t0 + D·(1−ρ) − holder margin ([Lease]). The holder stops
// early, the server reclaims late, and the gap between them is at least
// holder margin + grantor margin + ρ·D. [Keep] renews at D/3 and gives up the
// moment a renewal is refused or the deadline passes. [Keeper.Close]
// releases the lease; [Keeper.Orphan] stops renewing and leaves it to run
// out at its deadline, as etcd's Session.Orphan does.
//
// A lost reply costs nothing. A grant with a request ID and secret
// ([GrantRequest].RequestID, [NewRequestID]) can be sent again: the retry
// is answered with the tenure the first attempt made, if it was carried out,
// and a late attempt after that tenure ended grants nothing
// ([ErrRequestUsed]). [Acquire] retries an unanswered grant so, and counts
// the deadline from its first attempt. A renewal whose reply was lost is
// recovered by renewing the revision it stored, and a retried release
// succeeds.
//
// Every With… option refuses nil and out-of-range values with
// [ErrInvalidOption] before anything is sent; a value that is fine alone
// but does not fit the lease (a holder margin or renewal interval too long
// for its duration) is [ErrInvalidTiming].
//
// # What it does not guarantee
//
// Leases are liveness, fencing is safety. A process paused between
// [Lease.Check] and its effect (GC, swap, SIGSTOP, VM migration) acts after
// its deadline without knowing it. Only a resource that checks tokens makes
// that harmless: a fence ([github.com/leased/leased/kvlease/fence]: in
// process or across processes), or the SQL pattern in docs/fencing.md. Pass [Lease.Token] with every effect.
//
// Clocks must run at rates within ρ ([DefaultClockRate]) of each other. A
// forward step of the server's wall clock expires keys early; the grantor
// margin absorbs steps up to its size.
//
// # Tokens
//
// The token is the revision of the grant that began a tenure. It stays the
// same across the tenure's renewals and is higher than every revision before
// it in the bucket, since revisions are the stream's sequence numbers. A
// bucket that is deleted and recreated starts its revisions again, at 1
// unless its creator gives a first token above the old bucket's
// ([WithFirstToken], [WithNewBucketFirstToken]; serve begins a bucket it
// makes anew above the history it finds): [Open] never deletes a bucket, and
// operators must not either (a fence would refuse every new holder until
// their tokens passed the highest it saw, which is safe but stuck).
//
// # Group commit
//
// With sync before ack a stream syncs once per message, so concurrent
// writes stop scaling at the disk. A [Store] therefore commits concurrent
// grants, renewals, releases and revocations together, as JetStream
// atomic batches (nats-server 2.12 or newer; [Open] allows them on the
// bucket's stream, never recreating it): a write that finds the store idle
// goes out at once, alone; writes that arrive while one is in flight queue
// and go out together with the next, as one batch committed with one sync
// when there are enough of them to repay its fixed cost ([BatchLimits]),
// else as single publishes sent together. Each message keeps its own TTL
// and expected revision, and each caller gets its own answer: one stale
// request makes the server reject the whole batch, so the store screens out
// what it already knows to be stale and splits a rejected batch until
// every request has its true answer. A request is answered only after the
// server's ack, which comes after the sync: durability is the same as a
// single publish's. A queued request whose context ends before its batch
// goes out is never sent, so a renewal capped at its holder's deadline
// cannot reach the server after it. Callers that write in a loop would
// split into cohorts that alternate between writes, each paying a batch's
// fixed cost; so a store that has just answered a write may wait a little
// (BatchLimits.Linger, up to 5 ms on R1, and only while they keep coming)
// for those callers' next requests before it sends what has queued behind
// it. A write that finds the store idle is never delayed. Where batches
// do not form (a few callers, so that what queues stays below the
// break-even write after write), queueing would only make each request
// wait for the one ahead of it; the store then sends requests at once, as
// without batching, until there are callers enough for a batch again. The store's metric leased.store.write.messages
// ([WithStoreMeterProvider]) shows how many messages each synced write
// carried. [WithoutBatching] turns group commit off; [WithBatchLimits]
// sets its limits, which must stay within the server's. Batches pay only
// where there is a sync to share: on an R1 bucket of a server that
// acknowledges before it syncs (NATS's default sync_interval; leased serve
// --sync unsafe-interval) the server still stages each batch in a synced
// store of its own, and batched writes measured 0.2–0.4× raw single
// writes there, so use [WithoutBatching] on such a server.
//
// # Causes
//
// [Store.Watch] reads the bucket's stream, not the KV watch API, so that it
// can tell a release from a revocation from an expiry by TTL: the server marks
// a lapse with a Nats-Marker-Reason header and kvlease marks its own writes.
// Watchers are driven by these messages; nothing polls. [Watcher.CatchUp]
// folds a watcher's replay of the current state.
//
// # Packages
//
// This package is the lease core: the grantor side ([Store]), the holder
// side ([Lease], [Keeper]), [Watcher] and the timing arithmetic, with
// [Advise] to choose D and the margins from measurements, and
// [RetryUnavailable], the backoff loop that waits out [ErrUnavailable].
// Around it, each using only this package's exported API (fence and
// workqueue also share an internal compare-and-set loop):
//
//   - [github.com/leased/leased/kvlease/fence]: the resource side, which
//     refuses stale tokens (in process and across processes).
//   - [github.com/leased/leased/kvlease/election]: message-driven leader
//     election (candidates wait on the stream for the end of a tenure).
//   - [github.com/leased/leased/kvlease/workqueue]: work claims under
//     processing leases, completed at a fenced sink.
//   - [github.com/leased/leased/kvlease/readlease]: reads served from local
//     state while the lease is held.
//   - [github.com/leased/leased/kvlease/kvleasetest]: servers, clusters,
//     child processes and an in-memory Grantor for tests.
//
// Attribute keys and metric names are [github.com/leased/leased/telemetry]'s.
//
// See docs/safety.md for the arithmetic and the NATS facts it rests on.
package kvlease
