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

// OpenOption configures [Open]. An option returns an error for a value it
// cannot use; Open returns that error.
type OpenOption func(*openOptions) error

type openOptions struct{ replicas int }

func newOpenOptions(opts []OpenOption) (openOptions, error) {
	o := openOptions{replicas: 1}
	for _, opt := range opts {
		if opt == nil {
			return openOptions{}, fmt.Errorf("%w: nil workqueue open option", kvlease.ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return openOptions{}, err
		}
	}
	return o, nil
}

// WithReplicas sets the replica count of the queue's buckets: 1 on a
// single server (the default), 3 on a cluster. A count outside 1..5
// (JetStream's range) is an error.
func WithReplicas(n int) OpenOption {
	return func(o *openOptions) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d outside 1..5", kvlease.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}
