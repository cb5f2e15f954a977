package workqueue

import (
	"fmt"

	"github.com/leased/leased/kvlease"
)

// OpenOption configures [Open]. An option returns an error for a value it
// cannot use; Open returns that error.
type OpenOption func(*openOptions) error

type openOptions struct{ replicas int }

// newOpenOptions applies opts over the default: the lease store's
// replicas.
func newOpenOptions(store *kvlease.Store, opts []OpenOption) (openOptions, error) {
	o := openOptions{replicas: store.Replicas()}
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
// creates them: by default the lease bucket's (the sink is the fence of
// the items' completions: one replica on a cluster, and a lost node loses
// it); existing buckets keep their own. A count outside 1..5 (JetStream's
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
