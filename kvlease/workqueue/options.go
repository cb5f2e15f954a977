package workqueue

import (
	"fmt"
	"time"

	"github.com/leased/leased/kvlease"
)

// OpenOption configures [Open]. An option returns an error for a value it
// cannot use; Open returns that error.
type OpenOption func(*openOptions) error

type openOptions struct {
	replicas        int
	resultRetention time.Duration // 0: for good
	maxClaims       int           // 0: no bound
}

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

// MinResultRetention is the shortest [WithResultRetention].
const MinResultRetention = time.Hour

// WithResultRetention keeps each item's sink record (its result, and the
// bar its claims raise) for d after its last write, where Open creates the
// sink bucket; by default they are kept for good, and the sink grows with
// every item ever done. Opt-in, and weaker: once an item's record has
// gone, [Queue.Add] takes its id again (the item is done again), and a
// claim that works longer than d finds its bar gone and its completion
// refused ([*fence.StaleTokenError]; the item is redone). So is an item
// whose worker died between recording its result and removing it, if no
// claim comes for d. So d must be longer than any item takes, than any
// time without workers, and than the time within which an id may be
// added again. An existing sink keeps its own
// retention: Open with another is refused ([kvlease.ErrBucket]). A d below
// [MinResultRetention] is an error.
func WithResultRetention(d time.Duration) OpenOption {
	return func(o *openOptions) error {
		if d < MinResultRetention {
			return fmt.Errorf("%w: result retention %v, below %v", kvlease.ErrInvalidOption, d, MinResultRetention)
		}
		o.resultRetention = d
		return nil
	}
}

// WithMaxClaims gives an item up after n claims that did not complete it
// (each ended by its worker's Close, its lapse or its revocation): the
// Claim that finds an item claimed n times already claims it no more, but
// records it at the sink as given up, with its payload, and removes it
// from the queue, as a dead-letter queue would. [Queue.Result] then
// returns a [*GaveUpError] for it, and [Queue.Add] refuses its id. By
// default an item is claimed again for as long as it is not completed: a
// payload that crashes every worker that takes it (a poison message) is
// then taken by each worker in turn, for good. Open every worker of a
// queue with the same n: the Claim that comes to an item decides by its
// own (claims of one item are counted one at a time, each under the
// item's lease, so none passes n). A claim counts once it has raised the
// item's bar at the sink, before it is handed over: a Claim that fails
// after that (the server stops answering, or the item goes) has used one
// up, so a queue on a flaky network wants n above a worker's own retries.
// The Claim that gives an item up logs it (a warning, on the Store's
// [kvlease.WithLogger]) and counts it in leased.workqueue.items_given_up
// (on the Store's [kvlease.WithStoreMeterProvider], by workqueue.name),
// once: a give-up whose write goes unanswered is read back, and counted
// if it landed (unless that read fails too, for 2 s);
// [Queue.Result] of its id returns the payload. With [WithResultRetention], a given-up
// item's record, payload included, goes after the retention as a result's
// does. An n below 1 is an error.
func WithMaxClaims(n int) OpenOption {
	return func(o *openOptions) error {
		if n < 1 {
			return fmt.Errorf("%w: max claims %d, below 1", kvlease.ErrInvalidOption, n)
		}
		o.maxClaims = n
		return nil
	}
}
