// Package workqueue hands out work items under processing leases, and
// completes each at a fenced sink: a recipe built only on
// [github.com/leased/leased/kvlease]'s exported API.
//
// A worker claims a pending item ([Queue.Claim]: a lease named
// "claim.<queue>.<item>"), keeps the claim renewed while it works, and
// completes the item with the claim's token ([Claim.Complete]). A crashed
// or paused worker's claim lapses and another worker takes the item.
//
// # What it guarantees
//
// The sink ("<queue>-done", one record per item) is the fence: a claim
// raises the item's bar to its own token before work starts, and a
// completion is a compare-and-set that needs the bar at the claim's token
// and the item not yet done. Each item is completed at most once. Once a
// newer claim has raised the bar, an older claim's completion is refused
// with a [*github.com/leased/leased/kvlease/fence.StaleTokenError]; a
// completion whose holder deadline has passed when it checks is refused
// with a [*kvlease.LeaseExpiredError] before anything is written. Workers
// wait for new items and lapsed claims on the buckets' streams: nothing
// polls.
//
// # What it does not guarantee
//
// The completion need not come from a live claim: a worker paused between
// its check and the sink's compare-and-set, past its deadline, still
// completes the item if its successor has not raised the bar yet. The item
// is then done once, by that worker, and the next attempt to claim it finds
// it done and passes it by. Effects of the work itself, outside the sink,
// are not fenced: a worker paused past its claim can still act on other
// systems, before or after its successor raises the bar. Fence those
// effects with the claim's token ([Claim.Token]), and raise that fence as
// the claim is made, before the work: a fence refuses a late worker's
// write only once a newer token has reached it, so one fenced only at the
// write accepts a paused worker's write that comes before its successor's
// (docs/fencing.md; examples/pg-work-queue does both). Item ids are never
// reused: the sink keeps each item's result, and [Queue.Add] refuses a
// completed id with [ErrDone]. So the sink grows with every item done;
// [WithResultRetention] bounds it, and gives up that guarantee past the
// retention (opt-in).
//
// An item that no claim completes is claimed again, for good: one whose
// payload crashes every worker that takes it is taken by each in turn.
// [WithMaxClaims] bounds that: an item claimed n times gives up at the
// next Claim, which records it at the sink with its payload
// ([GaveUpError], from [Queue.Result]) and removes it from the queue.
//
// # Options
//
// [Queue.Claim] takes [kvlease.WithLease] (a holder margin, a clock guard: the
// options of [kvlease.Acquire]) and [kvlease.WithKeeper] (the options of
// [kvlease.Keep]). Both refuse nil options.
package workqueue
