package kvlease

import (
	"fmt"
	"time"
)

// HoldOption configures a recipe that acquires a lease and keeps it
// renewed, such as election.Campaign and workqueue.Claim: the options of
// the lease it takes ([WithLease]) and of the keeper that renews it
// ([WithKeeper]). An option returns an error for a value it cannot use.
type HoldOption func(*Hold) error

// Hold is what a recipe's HoldOptions ask of its [Acquire] and [Keep].
type Hold struct {
	Lease  []LeaseOption
	Keeper []KeeperOption
	// OnUnavailable, if set, is called each time the recipe waits for a
	// grantor that does not answer ([WithOnUnavailable]).
	OnUnavailable func(error)
}

// NewHold applies opts. Errors: [ErrInvalidOption] for a nil option, or
// what an option returns.
func NewHold(opts ...HoldOption) (Hold, error) {
	var h Hold
	for _, opt := range opts {
		if opt == nil {
			return Hold{}, fmt.Errorf("%w: nil hold option", ErrInvalidOption)
		}
		if err := opt(&h); err != nil {
			return Hold{}, err
		}
	}
	return h, nil
}

// Check refuses options that [Acquire] or [Keep] would refuse for a lease
// of duration d, before anything is sent: a recipe that waits (a campaign
// while another leads, a claim while all items are taken) would otherwise
// find them wrong only after it had been granted the lease.
func (h Hold) Check(d time.Duration) error {
	o, err := newLeaseOptions(d, h.Lease)
	if err != nil {
		return err
	}
	var k Keeper
	return k.apply(d, o.margin, o.rho, h.Keeper)
}

// WithLease passes options to the recipe's [Acquire]: a holder margin, a
// clock-rate bound or guard, attributes. A nil option is refused with
// [ErrInvalidOption].
func WithLease(opts ...LeaseOption) HoldOption {
	return func(h *Hold) error {
		for _, opt := range opts {
			if opt == nil {
				return fmt.Errorf("%w: nil lease option", ErrInvalidOption)
			}
		}
		h.Lease = append(h.Lease, opts...)
		return nil
	}
}

// WithOnUnavailable calls f, with the error, each time the recipe waits
// for a grantor that does not answer (a cluster without a quorum): it
// tries again, after waits that double up to a second, while its context
// allows. Calls are not concurrent. A nil f is refused with
// [ErrInvalidOption].
func WithOnUnavailable(f func(error)) HoldOption {
	return func(h *Hold) error {
		if f == nil {
			return fmt.Errorf("%w: nil OnUnavailable", ErrInvalidOption)
		}
		h.OnUnavailable = f
		return nil
	}
}

// WithKeeper passes options to the [Keep] that renews the recipe's lease
// (callbacks, a renewal interval, a meter provider). A nil option is
// refused with [ErrInvalidOption].
func WithKeeper(opts ...KeeperOption) HoldOption {
	return func(h *Hold) error {
		for _, opt := range opts {
			if opt == nil {
				return fmt.Errorf("%w: nil keeper option", ErrInvalidOption)
			}
		}
		h.Keeper = append(h.Keeper, opts...)
		return nil
	}
}
