// Command leased is the lease grantor: `leased serve` runs a grantor node
// with an embedded NATS JetStream server; see `leased --help`.
//
// The command is thin: main runs [github.com/leased/leased/cmd/leased/cli.Main]
// with a context that SIGINT and SIGTERM cancel, and exits with the code it
// returns. What the commands guarantee (exit codes, messages, what a
// signal stops) is that package's, and the tests drive it there.
package main
