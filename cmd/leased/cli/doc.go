// Package cli implements the leased command line. [Main] is what the binary
// runs and what tests drive.
//
// # What it guarantees
//
// Exit codes are stable, since scripts test them: 0 ok, 1 failure, 2 bad
// flags or arguments, 3 held by someone else, 4 no such live lease, 5
// `acquire --hold` lost the lease, 6 renew or release refused, 7
// permission denied (README, "Quick start"); `leased run` exits with its
// command's code instead. Error messages carry no Go package names.
// Cancelling Main's context (SIGINT, SIGTERM in the binary) stops a
// running server, or a command that holds a lease.
//
// # What it does not do
//
// It holds no lease logic of its own: every command is a client of
// [github.com/leased/leased/grantor/client] or
// [github.com/leased/leased/kvlease], or runs [github.com/leased/leased/grantor].
// It installs exporters only through
// [github.com/leased/leased/telemetry/otelsetup].
package cli
