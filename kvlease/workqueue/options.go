package workqueue

import (
	"fmt"

	"github.com/leased/leased/kvlease"
)

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

// WithReplicas sets the replica count of the queue's buckets where Open
// creates them: 1 on a single server (the default), 3 on a cluster;
// existing buckets keep their own. A count outside 1..5 (JetStream's
// range) is an error.
func WithReplicas(n int) OpenOption {
	return func(o *openOptions) error {
		if n < 1 || n > 5 {
			return fmt.Errorf("%w: replicas %d outside 1..5", kvlease.ErrInvalidOption, n)
		}
		o.replicas = n
		return nil
	}
}
