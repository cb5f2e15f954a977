package kvlease

import (
	"time"

	"github.com/nats-io/nats.go"
)

// ConnOptions are the nats.go options a lease holder's connection wants;
// the leased CLI connects with them. Pass them to nats.Connect before
// options of your own (a later option overrides an earlier one):
//
//   - ReconnectBufSize(-1): nothing published while reconnecting is
//     buffered, so a renewal is never flushed after the holder's deadline
//     (docs/safety.md); it fails at once, and the keeper tries again;
//   - MaxReconnects(-1): the connection never gives up; the lease's
//     deadline, not the connection, says when authority ends;
//   - PingInterval(PingInterval), MaxPingsOutstanding(MaxPingsOut): a
//     server that stops answering (a paused process, a cut-off node) is
//     left for another server of the cluster within about 4 s, not after
//     nats.go's default of several minutes, which outlasts a lease;
//   - ReconnectWait(ReconnectWait): a server that restarts is reached
//     again within about a quarter of a second of being back, not after
//     nats.go's 2 s, which cost a lease of 3 s its tenure over a restart
//     that took 1.25 s (found by an outside client). nats.go adds up to
//     100 ms of jitter (1 s with TLS) to each wait.
func ConnOptions() []nats.Option {
	return []nats.Option{nats.ReconnectBufSize(-1), nats.MaxReconnects(-1),
		nats.PingInterval(PingInterval), nats.MaxPingsOutstanding(MaxPingsOut), nats.ReconnectWait(ReconnectWait)}
}

// ReconnectWait is how long [ConnOptions] has nats.go wait before it tries
// a server again.
const ReconnectWait = 250 * time.Millisecond

// PingInterval and MaxPingsOut are the pings of [ConnOptions]: a server
// that leaves MaxPingsOut pings, sent every PingInterval, unanswered is
// given up for another.
const (
	PingInterval = time.Second
	MaxPingsOut  = 3
)
