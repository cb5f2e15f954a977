package membership

import "errors"

// Sentinel errors. Every error this package returns wraps one of these, so
// callers test with [errors.Is] and never need to import memberlist.
var (
	// ErrConfig: a [Config] field has a value it cannot take, or values
	// that do not fit together (see [Config.Validate]).
	ErrConfig = errors.New("membership: invalid config")
	// ErrMeta: node metadata is malformed or does not fit in a gossip
	// message (see [MaxMetaSize]). Always together with ErrConfig when it
	// comes from [Config.Validate].
	ErrMeta = errors.New("membership: invalid metadata")
	// ErrStart: the gossip listener could not be started (address in use,
	// no usable advertise address …).
	ErrStart = errors.New("membership: cannot start")
	// ErrJoin: no seed could be contacted, or no seed was given.
	ErrJoin = errors.New("membership: join failed")
	// ErrTimeout: a broadcast (leave, metadata update) was not sent to any
	// member within the timeout. The change is still in effect locally and
	// gossip may carry it later.
	ErrTimeout = errors.New("membership: timed out")
	// ErrClosed: the node has been shut down.
	ErrClosed = errors.New("membership: node shut down")
)
