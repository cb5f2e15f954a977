// Package fence is the resource side of a lease: it makes overlapping
// holders harmless by refusing stale fencing tokens.
//
// A fence remembers, per resource, the highest [kvlease.Token] it has
// accepted and refuses any lower one with a [*StaleTokenError] (which
// [errors.Is] matches to [ErrStaleToken]). A holder that was paused past its
// deadline and resumes carries an old token, and is refused once its
// successor has written. Equal tokens are accepted: one tenure may write
// many times.
//
// # What it guarantees
//
// The check and the effect are one atomic step at the resource. [Mem], in
// process, serializes the check and the effect per resource. [KV], across
// processes, keeps each resource's value and token in a JetStream KV key and
// writes with a compare-and-set on the key's revision, so the server decides
// between racing writers. [SQL] lives in a PostgreSQL database, next to the
// data it guards: [SQL.Check] raises the resource's token inside the
// caller's transaction, so the token and the guarded write commit together
// or not at all, and the row lock it takes serializes fenced transactions on
// one resource (the reasoning for READ COMMITTED and SERIALIZABLE is in
// [SQL.Check]'s doc).
//
// # What it does not guarantee
//
// A fence protects only what goes through it. [KV] used as a gate in front
// of another resource (a file, a remote API) can still be raced between the
// gate and that resource: prefer a fence inside the resource. In a SQL
// database that is [SQL], or, for a table of your own, one statement
// (docs/fencing.md):
//
//	UPDATE resource SET value = :value, last_token = :token
//	 WHERE id = :id AND last_token <= :token AND :token > 0;
//	-- UPDATE 0: stale token (or none: 0, the column's default), refuse.
//
// [SQL] speaks PostgreSQL's dialect (INSERT … ON CONFLICT, $n parameters)
// through [database/sql]: the package imports no driver, bring your own
// (github.com/jackc/pgx/v5/stdlib). A token guards only writes made in the
// transaction that checked it; writes committed elsewhere are not fenced.
//
// Tokens compare only within one lease bucket: a bucket that is deleted and
// recreated starts its revisions again, and the fence then refuses every new
// holder (safe, but stuck), unless the new bucket begins above the old
// one's tokens ([github.com/leased/leased/kvlease.WithFirstToken]; serve's
// --first-token; serve begins a bucket it makes anew above the history it
// finds).
//
// # Metrics
//
// Set a fence's Metrics field to count refusals
// ([github.com/leased/leased/telemetry.MetricFenceRejections]); the resource
// is never a label.
package fence
