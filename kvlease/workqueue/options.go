package workqueue

import (
	"fmt"

	"github.com/leased/leased/kvlease"
)

// Option configures [Queue.Claim]: the lease a claim takes and the keeper
// that renews it.
type Option func(*options) error

type options struct {
	lease  []kvlease.LeaseOption
	keeper []kvlease.KeeperOption
}

func newOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt == nil {
			return options{}, fmt.Errorf("%w: nil workqueue option", kvlease.ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithLease passes options to the claim's [kvlease.Acquire]: a holder
// margin, a clock-rate bound or guard, attributes. A nil option is refused
// with [kvlease.ErrInvalidOption].
func WithLease(opts ...kvlease.LeaseOption) Option {
	return func(o *options) error {
		for _, opt := range opts {
			if opt == nil {
				return fmt.Errorf("%w: nil lease option", kvlease.ErrInvalidOption)
			}
		}
		o.lease = append(o.lease, opts...)
		return nil
	}
}

// WithKeeper passes options to the [kvlease.Keep] that renews the claim
// (callbacks, a renewal interval, a meter provider). A nil option is
// refused with [kvlease.ErrInvalidOption].
func WithKeeper(opts ...kvlease.KeeperOption) Option {
	return func(o *options) error {
		for _, opt := range opts {
			if opt == nil {
				return fmt.Errorf("%w: nil keeper option", kvlease.ErrInvalidOption)
			}
		}
		o.keeper = append(o.keeper, opts...)
		return nil
	}
}
