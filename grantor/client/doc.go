// Package client is the Go client of the leased service.
//
// [Client] speaks the protocol of [github.com/leased/leased/grantor/api]
// over a NATS connection and implements [kvlease.Grantor], so
// [kvlease.Acquire] and [kvlease.Keep] work over it unchanged; [Register]
// keeps a service registration renewed and [Client.Discover] asks for the
// instances of a service.
//
// # Errors
//
// Errors are kvlease's ([kvlease.ErrHeld], [kvlease.ErrNotHolder],
// [kvlease.ErrUnavailable], …) wrapped in an [*api.ServiceError] that
// carries the wire code: test them with [errors.Is] as for a
// [kvlease.Store]. A request while the connection is down fails at once
// with kvlease.ErrUnavailable instead of being buffered past the holder's
// deadline. So does a grant answered "held" by an older tenure than one
// this client has seen for that lease in the last minute: a node whose
// view is behind (a stream leader cut off from its peers) said it, and
// kvlease.Acquire asks again rather than stopping on it.
//
// A request the NATS server's permissions refuse (a publish the user may
// not make, replies on an inbox it may not subscribe to) gets no reply:
// nats.go reports the refusal, an error wrapping nats.ErrPermissionViolation
// that names the subject, to the connection's error handler
// (nats.ErrorHandler), not to the request, which ends as
// kvlease.ErrUnavailable when its ctx does, and would be retried as if the
// grantor were down. A program whose users' permissions are narrow should
// install a handler that stops it on such an error, as the leased command
// does (it exits 7 at once).
//
// # Clocks
//
// Every reply carries the answering grantor's clock. [ClockEstimator]
// (from [Client.Clock]) estimates the offset, Cristian-style, and the rate
// error against this machine's monotonic clock, per grantor node. Safety
// depends only on the rate: pass Clock().Exceeds to [kvlease.WithClockGuard]
// to stop counting a lease as held once the measured rate error, less its
// uncertainty, exceeds the lease's bound.
//
// # What it does not do
//
// The client does not retry, renew or fail over by itself: [kvlease.Keeper]
// renews, and NATS routes each request to any grantor node. It links
// neither the server side (nats.go/micro) nor gossip (memberlist): a
// program that only holds leases stays small.
package client
