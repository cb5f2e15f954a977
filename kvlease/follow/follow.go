// Package follow reads a JetStream stream's messages under a filter in
// order, from a starting point on, through ephemeral consumers it makes
// anew whenever one stops answering: what nats.go's ordered consumer does,
// without its trap in a cluster. It is one place for the lease store's
// watches and the grantor's history follows.
//
// The trap: a consumer of a replicated stream is one (R1, in memory) on
// one of the stream's nodes, chosen by the server at random. When that
// node dies, the server takes it for offline only minutes later (its
// orphan check, 5 × 30 s), and meanwhile may place a new consumer on it
// again. nats.go's ordered consumer retries that same consumer, by name,
// for ever: the creation answers only once the node comes back, and the
// watch delivers nothing until then (seen: a lease watch that missed every
// lapse for 30 s after a node was killed). A Follower bounds each creation
// and gives each attempt a new name, so each is placed afresh.
package follow

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// AttemptTimeout bounds one creation of a consumer. A consumer placed on a
// node that is down never answers; one created on a live node answers in
// milliseconds, and in seconds on a loaded machine.
const AttemptTimeout = 3 * time.Second

// inactiveThreshold is how long the server keeps a consumer nobody pulls
// from (a Follower deletes its own when it stops; this is for one whose
// process died), as nats.go's ordered consumer has it.
const inactiveThreshold = 5 * time.Minute

// Config says what a Follower reads.
type Config struct {
	Stream string
	Filter string
	// Deliver, with StartTime or StartSeq where the policy takes one, is
	// where the first consumer starts. Later ones start after the last
	// message delivered.
	Deliver   jetstream.DeliverPolicy
	StartTime *time.Time
	StartSeq  uint64
	// Heartbeat is the consumer's idle heartbeat: one that misses two is
	// replaced.
	Heartbeat time.Duration
}

// Follower delivers a stream's messages in order, each once. Next is for
// one goroutine; Stop may be called from any.
type Follower struct {
	js     jetstream.JetStream
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	info   *jetstream.ConsumerInfo

	// Next's own: the stream sequence to resume from (0: where cfg says)
	// and the consumer sequence of the last message of the current one.
	resume    uint64
	delivered uint64

	mu   sync.Mutex // guards what Stop and reconnects touch
	cons jetstream.Consumer
	it   jetstream.MessagesContext // nil between consumers
	// reconnects counts the connection's reconnects: a consumer whose
	// creation began before one is not used.
	reconnects int
}

// Start makes the first consumer in one attempt bounded by ctx and
// AttemptTimeout, returning its error (the caller decides whether to try
// again). The Follower's later consumers are made until one answers or it
// is stopped.
func Start(ctx context.Context, js jetstream.JetStream, cfg Config) (*Follower, error) {
	f := &Follower{js: js, cfg: cfg}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	connected := js.Conn().StatusChanged(nats.CONNECTED)
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	if err := f.open(actx); err != nil {
		f.cancel()
		js.Conn().RemoveStatusListener(connected)
		return nil, err
	}
	go f.dropOnReconnect(connected)
	f.info = f.cons.CachedInfo()
	if f.cfg.Deliver == jetstream.DeliverNewPolicy {
		// Resume after what was there at creation, not after what is
		// there when the first consumer is replaced.
		f.resume = f.info.Delivered.Stream + 1
	}
	return f, nil
}

// Info is the first consumer's info at its creation: NumPending is what
// the start point left to read then.
func (f *Follower) Info() *jetstream.ConsumerInfo { return f.info }

// Next returns the next message. It returns an error only once the
// Follower is stopped (jetstream.ErrMsgIteratorClosed) or its connection
// closed (nats.ErrConnectionClosed); anything else a consumer meets
// (missed heartbeats, deletion, a gap) makes a new one, starting after
// the last message returned.
func (f *Follower) Next() (jetstream.Msg, error) {
	for {
		f.mu.Lock()
		it := f.it
		f.mu.Unlock()
		if it == nil {
			if err := f.reopen(); err != nil {
				return nil, err
			}
			continue
		}
		m, err := it.Next()
		switch {
		case f.ctx.Err() != nil:
			return nil, jetstream.ErrMsgIteratorClosed
		case errors.Is(err, nats.ErrConnectionClosed):
			return nil, err
		case err != nil:
			f.drop()
			continue
		}
		md, err := m.Metadata()
		if err != nil || md.Sequence.Consumer != f.delivered+1 {
			f.drop() // a gap: read again from after the last message returned
			continue
		}
		f.delivered, f.resume = md.Sequence.Consumer, md.Sequence.Stream+1
		return m, nil
	}
}

// Stop ends the Follower and deletes its consumer. Next returns
// jetstream.ErrMsgIteratorClosed.
func (f *Follower) Stop() {
	f.cancel()
	f.drop()
}

// dropOnReconnect drops the consumer whenever the connection comes back:
// what the server sent it while the connection was down is lost, and the
// consumer, which acknowledges nothing, will not send it again (a watch
// cut off by a partition missed the release and the grant made meanwhile,
// and then everything, as nothing more came to show a gap).
func (f *Follower) dropOnReconnect(connected chan nats.Status) {
	defer f.js.Conn().RemoveStatusListener(connected)
	for {
		select {
		case <-connected:
			f.mu.Lock()
			f.reconnects++
			f.mu.Unlock()
			f.drop()
		case <-f.ctx.Done():
			return
		}
	}
}

// drop stops the current consumer and deletes it in the background: the
// server would otherwise keep it for inactiveThreshold, taking a signal
// for every message stored.
func (f *Follower) drop() {
	f.mu.Lock()
	it, cons := f.it, f.cons
	f.it, f.cons = nil, nil
	f.mu.Unlock()
	if it != nil {
		it.Stop()
	}
	if cons != nil {
		f.discard(cons.CachedInfo().Name)
	}
}

func (f *Follower) discard(name string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.js.DeleteConsumer(ctx, f.cfg.Stream, name)
	}()
}

// reopen makes a new consumer, attempt after attempt, until one answers,
// an attempt fails for good, or the Follower is stopped.
func (f *Follower) reopen() error {
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		actx, cancel := context.WithTimeout(f.ctx, AttemptTimeout)
		err := f.open(actx)
		cancel()
		switch {
		case f.ctx.Err() != nil:
			f.drop()
			return jetstream.ErrMsgIteratorClosed
		case err == nil:
			return nil
		case permanent(err):
			return err
		}
		select {
		case <-time.After(wait):
		case <-f.ctx.Done():
		}
	}
}

// open makes one consumer, named afresh, and starts pulling from it.
func (f *Follower) open(ctx context.Context) error {
	f.mu.Lock()
	reconnects := f.reconnects
	f.mu.Unlock()
	cc := jetstream.ConsumerConfig{
		Name:              nuid.Next(),
		FilterSubject:     f.cfg.Filter,
		DeliverPolicy:     f.cfg.Deliver,
		OptStartTime:      f.cfg.StartTime,
		OptStartSeq:       f.cfg.StartSeq,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: inactiveThreshold,
		Replicas:          1,
		MemoryStorage:     true,
	}
	if f.resume > 0 {
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = jetstream.DeliverByStartSequencePolicy, f.resume, nil
	}
	cons, err := f.js.CreateConsumer(ctx, f.cfg.Stream, cc)
	if err != nil {
		// It may yet be made, on a node that comes back.
		f.discard(cc.Name)
		return err
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(f.cfg.Heartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		f.discard(cc.Name)
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reconnects != reconnects {
		it.Stop()
		f.discard(cc.Name)
		return errReconnected
	}
	f.cons, f.it, f.delivered = cons, it, 0
	return nil
}

var errReconnected = errors.New("reconnected while the consumer was made")

// permanent reports whether a creation failed for a reason another
// attempt will not change: the stream is gone, or the request is wrong.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.As(err, &apiErr) && (apiErr.Code == http.StatusNotFound || apiErr.Code == http.StatusBadRequest)
}
