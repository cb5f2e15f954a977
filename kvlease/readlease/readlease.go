package readlease

import (
	"context"
	"fmt"
	"time"

	"github.com/leased/leased/kvlease"
)

// ServedFrom says where a read under a read lease was served from.
type ServedFrom string

const (
	// ServedLocal: from the leader's local state, while its lease was safely
	// held (at least the read margin left before its holder deadline).
	ServedLocal ServedFrom = "local"
	// ServedAuthoritative: not enough lease left; confirmed through the
	// authoritative read (e.g. the stream leader), whatever local state said.
	ServedAuthoritative ServedFrom = "authoritative"
)

// Read serves a read under a lease: from local state if the lease
// has at least margin left before the holder's deadline (checked before and
// again after reading local state), otherwise through authoritative. A
// local read that fails is not an answer either: its error is dropped, and
// the read served through authoritative, whose error Read returns.
//
// Why local reads are safe while the lease is held: no other holder can be
// granted the lease before this holder's deadline (t0 + D·(1−ρ) − m_h, with
// the clock-rate bound ρ of the lease), so no leader of a later tenure can
// write meanwhile. An earlier one can, until this tenure's token reaches
// the resource's fence: local must be state loaded or written after that
// (see the package doc). margin must cover the time from the second
// check to the reply reaching the client. A pause of the process between the
// check and the reply is not covered by any margin: a client that cannot
// accept a read that old must read authoritatively.
//
// A read is no effect: one made after the lease has ended is not counted
// in [kvlease.Lease.LateEffects].
//
// Errors: [kvlease.ErrInvalidOption] for a nil lease or read, or a
// margin that is negative or that no lease of l's has left, its duration
// less its holder margin or more (nothing read); authoritative's.
func Read[T any](ctx context.Context, l *kvlease.Lease, margin time.Duration,
	local func() (T, error), authoritative func(context.Context) (T, error)) (T, ServedFrom, error) {
	if l == nil || local == nil || authoritative == nil {
		var zero T
		return zero, "", fmt.Errorf("%w: readlease.Read needs a lease and both reads", kvlease.ErrInvalidOption)
	}
	if margin < 0 {
		// Taken as 0 it was accepted silently (found by an outside client).
		var zero T
		return zero, "", fmt.Errorf("%w: read margin %v is negative", kvlease.ErrInvalidOption, margin)
	}
	if most := l.Duration() - l.Margin(); margin >= most {
		// No lease ever has it left: every read went to the authority,
		// silently (found trying the README's read lease, 10s for 10s).
		var zero T
		return zero, "", fmt.Errorf("%w: read margin %v leaves no local read: a lease of %v has less than %v left (its holder margin is %v)",
			kvlease.ErrInvalidOption, margin, l.Duration(), most, l.Margin())
	}
	if held(l, margin) {
		v, err := local()
		if err == nil && held(l, margin) {
			return v, ServedLocal, nil
		}
	}
	v, err := authoritative(ctx)
	return v, ServedAuthoritative, err
}

// held reports whether l has more than margin left and its clock guard, if
// any, allows it. The time left is looked at first: CheckFor on a lease
// that has ended counts an effect attempted after the deadline, and every
// read of a holder whose lease had ended counted as an expiry during work
// (found by an outside client).
func held(l *kvlease.Lease, margin time.Duration) bool {
	return l.Remaining() > margin && l.CheckFor(margin) == nil
}
