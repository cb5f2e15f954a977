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
	// replaced. Zero is DefaultHeartbeat (without heartbeats a consumer
	// on a node that died would never be replaced).
	Heartbeat time.Duration
	// HeadersOnly delivers each message's headers without its data.
	HeadersOnly bool
	// OnReopen, if not nil, is called by Next, on Next's goroutine, each
	// time it has made a consumer to replace one, before it reads from
	// it; info is the new consumer's as created (Created is the server's
	// time of its creation). The consumer resumes after the last message
	// Next returned, but what the stream no longer holds by then (a
	// message whose TTL lapsed while no consumer delivered) it never
	// delivers: a reader that keeps state can look for such losses here.
	// It may block (Next waits for it); Stop does not interrupt it.
	OnReopen func(info *jetstream.ConsumerInfo)
	// OnDrop, if not nil, is called each time the Follower stops
	// following: it loses its connection (nats.go reconnecting) while it
	// reads from a consumer, or gives up a consumer with its connection up
	// (missed heartbeats, a gap, deletion). Until it has made the next
	// consumer, on a connection that is up, nothing is delivered, and
	// making one can take seconds (a cluster whose meta leader died elects
	// another first). Once per loss: the reconnect that ends a lost
	// connection drops the consumer read from before it, which was lost
	// with the connection, without another call. Not on Stop. It is
	// called from Next's goroutine or the connection's status listener,
	// and must not block.
	OnDrop func()
}

// DefaultHeartbeat is a Config's Heartbeat when it gives none.
const DefaultHeartbeat = time.Second

// Follower delivers a stream's messages in order, each once. Next is for
// one goroutine; Stop may be called from any, and must be called once the
// Follower is no longer read: until then it keeps a consumer on the server
// and a listener on the connection.
type Follower struct {
	js       jetstream.JetStream
	cfg      Config
	ctx      context.Context
	cancel   context.CancelFunc
	stopOnce sync.Once
	info     *jetstream.ConsumerInfo

	// Next's own: the stream sequence to resume from (0: where cfg says),
	// the consumer sequence of the last message of the current consumer,
	// when that consumer was made, and the wait before the next creation
	// (grown while consumers fail without delivering, so that one that
	// fails at once is not made again and again at full speed).
	resume    uint64
	delivered uint64
	opened    time.Time
	wait      time.Duration

	// created is the stream's creation time when the Follower started
	// (zero if it could not be read): one made anew since is another
	// stream, whose sequence numbers started again (see ErrStreamReplaced).
	created time.Time

	mu   sync.Mutex // guards what Stop and reconnects touch
	cons jetstream.Consumer
	it   jetstream.MessagesContext // nil between consumers
	// reconnects counts the connection's reconnects: a consumer whose
	// creation began before one is not used.
	reconnects int
	// cut: the connection was lost and has not come back. Its consumer
	// delivers nothing meanwhile (nats.go stops its heartbeat check, so
	// nothing else says so), and is dropped when it comes back.
	cut bool
}

// Start makes the first consumer in one attempt bounded by ctx and
// AttemptTimeout, returning its error (the caller decides whether to try
// again). The Follower's later consumers are made until one answers or it
// is stopped.
func Start(ctx context.Context, js jetstream.JetStream, cfg Config) (*Follower, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	f := &Follower{js: js, cfg: cfg}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	// A listener of its own: handlers the connection's owner set are
	// left as they are.
	status := js.Conn().StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED)
	actx, cancel := context.WithTimeout(ctx, AttemptTimeout)
	defer cancel()
	cons, err := f.open(actx)
	if err != nil {
		f.cancel()
		js.Conn().RemoveStatusListener(status)
		return nil, err
	}
	f.info = cons.CachedInfo()
	f.created = f.streamCreated(actx)
	if f.cfg.Deliver == jetstream.DeliverNewPolicy {
		// Resume after what was there at creation, not after what is
		// there when the first consumer is replaced.
		f.resume = f.info.Delivered.Stream + 1
	}
	go f.followConn(status)
	return f, nil
}

// Following reports whether the Follower has a consumer to read from now,
// on a connection that is up: false from a loss (see Config.OnDrop) until
// the next consumer is made once the connection is back, and once
// stopped.
func (f *Follower) Following() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.it != nil && !f.cut
}

// Info is the first consumer's info at its creation: NumPending is what
// the start point left to read then.
func (f *Follower) Info() *jetstream.ConsumerInfo { return f.info }

// Next returns the next message. It returns an error only once the
// Follower is stopped (jetstream.ErrMsgIteratorClosed), its connection
// closed (nats.ErrConnectionClosed), its stream is gone (not found by
// streamMissingAttempts creations in a row) or was made anew
// (ErrStreamReplaced); anything else a consumer
// meets (missed heartbeats, deletion, a gap, a reconnect, a creation
// unanswered or refused, as for a limit on consumers) makes a new one,
// at most a second after the last attempt, starting after the last
// message returned. A refusal that passes, such as a limit that frees
// up, costs nothing but the wait; one that lasts leaves Next waiting, as
// a reader that ends on it would leave its caller (the grantor's own
// watches among them) without the stream for good.
func (f *Follower) Next() (jetstream.Msg, error) {
	for {
		f.mu.Lock()
		it := f.it
		f.mu.Unlock()
		if it == nil {
			info, err := f.reopen()
			if err != nil {
				return nil, err
			}
			if f.cfg.OnReopen != nil {
				f.cfg.OnReopen(info)
			}
			continue
		}
		m, err := it.Next()
		switch {
		case f.ctx.Err() != nil:
			return nil, jetstream.ErrMsgIteratorClosed
		case err != nil && f.closed(err):
			return nil, nats.ErrConnectionClosed
		case err != nil:
			f.drop(false)
			continue
		}
		md, err := m.Metadata()
		if err != nil || md.Sequence.Consumer != f.delivered+1 {
			f.drop(false) // a gap: read again from after the last message returned
			continue
		}
		f.delivered, f.resume, f.wait = md.Sequence.Consumer, md.Sequence.Stream+1, 0
		return m, nil
	}
}

// closed reports whether the connection is closed for good (not
// reconnecting): nats.go says so with errors of two packages.
func (f *Follower) closed(err error) bool {
	return errors.Is(err, jetstream.ErrConnectionClosed) || errors.Is(err, nats.ErrConnectionClosed) ||
		f.js.Conn().IsClosed()
}

// Stop ends the Follower and deletes its consumer, waiting up to a second
// for the server's answer (after that, or if the connection is down, the
// server removes the consumer itself after inactiveThreshold); a second
// call waits for the first. A consumer whose creation Next had under way
// is deleted by Next before it returns jetstream.ErrMsgIteratorClosed.
func (f *Follower) Stop() {
	f.stopOnce.Do(func() {
		f.cancel()
		f.drop(true)
	})
}

// followConn follows the connection's status. A connection lost (nats.go
// reconnecting, or closing) cuts the Follower off: said at once (OnDrop,
// Following false), as nothing else says it until the connection is back
// (a watch cut off for 15 s reported no interrupt, Interrupted false,
// found in review). The consumer is dropped whenever the connection comes
// back: what the server sent it while the connection was down is lost,
// and the consumer, which acknowledges nothing, will not send it again (a
// watch cut off by a partition missed the release and the grant made
// meanwhile, and then everything, as nothing more came to show a gap).
func (f *Follower) followConn(status chan nats.Status) {
	defer f.js.Conn().RemoveStatusListener(status)
	for {
		select {
		case s, ok := <-status:
			if !ok {
				return // the listener was removed
			}
			if s != nats.CONNECTED {
				f.mu.Lock()
				lost := f.it != nil && !f.cut
				f.cut = true
				f.mu.Unlock()
				if lost {
					f.dropped()
				}
				continue
			}
			f.mu.Lock()
			f.reconnects++
			it, cons, cut := f.it, f.cons, f.cut
			f.it, f.cons, f.cut = nil, nil, false
			f.mu.Unlock()
			f.release(it, cons, false, !cut)
		case <-f.ctx.Done():
			return
		}
	}
}

// dropped calls OnDrop, unless the Follower is stopped.
func (f *Follower) dropped() {
	if f.cfg.OnDrop != nil && f.ctx.Err() == nil {
		f.cfg.OnDrop()
	}
}

// drop stops the current consumer and deletes it, in the background unless
// wait: the server would otherwise keep it for inactiveThreshold, taking a
// signal for every message stored.
func (f *Follower) drop(wait bool) {
	f.mu.Lock()
	it, cons, cut := f.it, f.cons, f.cut
	f.it, f.cons = nil, nil
	f.mu.Unlock()
	f.release(it, cons, wait, !wait && !cut)
}

// release stops it and deletes cons, as drop says, calling OnDrop if
// lost and there was a consumer to lose.
func (f *Follower) release(it jetstream.MessagesContext, cons jetstream.Consumer, wait, lost bool) {
	if it != nil {
		it.Stop()
		if lost {
			f.dropped()
		}
	}
	if cons == nil {
		return
	}
	if wait {
		f.delete(cons.CachedInfo().Name, time.Second)
		return
	}
	go f.delete(cons.CachedInfo().Name, 10*time.Second)
}

func (f *Follower) delete(name string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = f.js.DeleteConsumer(ctx, f.cfg.Stream, name)
}

// reopen makes a new consumer, attempt after attempt, until one answers
// (returning its info),
// the stream is gone, the connection is closed, or the Follower is
// stopped. The first attempt waits only if the consumer before failed
// without delivering anything within a few seconds of its creation.
func (f *Follower) reopen() (*jetstream.ConsumerInfo, error) {
	if time.Since(f.opened) > 5*time.Second {
		f.wait = 0
	}
	missing := 0
	var notFound error // the last answer that the stream is missing
	for {
		if f.wait > 0 {
			select {
			case <-time.After(f.wait):
			case <-f.ctx.Done():
			}
		}
		f.wait = min(max(2*f.wait, 50*time.Millisecond), time.Second)
		switch {
		case f.ctx.Err() != nil:
			return nil, jetstream.ErrMsgIteratorClosed
		case f.js.Conn().IsClosed():
			return nil, nats.ErrConnectionClosed
		}
		actx, cancel := context.WithTimeout(f.ctx, AttemptTimeout)
		cons, err := f.open(actx)
		var created time.Time
		if err == nil {
			created = f.streamCreated(actx)
		}
		cancel()
		switch {
		case f.ctx.Err() != nil:
			return nil, jetstream.ErrMsgIteratorClosed
		case err == nil && !created.IsZero() && !f.created.IsZero() && !created.Equal(f.created):
			f.drop(false)
			return nil, ErrStreamReplaced
		case err == nil:
			return cons.CachedInfo(), nil
		case errors.Is(err, jetstream.ErrStreamNotFound), notFound != nil && unanswered(err):
			// A node that has not yet got its copy of the stream says so
			// too: only a stream missing for several attempts is gone.
			// An attempt JetStream leaves unanswered after one that found
			// the stream missing counts as missing too: it says nothing
			// either way. It began the count again, and in a cluster whose
			// other nodes had stopped on finding their bucket deleted (its
			// meta group then without a majority, its creations timed out
			// and then refused 503) the last node's count never ended: it
			// ran on for good, in one run of four (found deleting the
			// bucket under leased dev-cluster).
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				notFound = err
			}
			if missing++; missing == streamMissingAttempts {
				return nil, notFound
			}
		default:
			missing, notFound = 0, nil
		}
	}
}

// ErrStreamReplaced: the stream was deleted and made anew since the
// Follower started (a NATS server restarted on an empty store, a bucket
// recreated). Its sequence numbers started again, below where the
// Follower was, and it waited for good for messages past that point: a
// lease watch went silent, missing every grant and expiry on the new
// bucket (found by an outside client).
var ErrStreamReplaced = errors.New("the stream was deleted and made anew since the follow began: its sequence numbers started again")

// unanswered reports whether err is JetStream's silence rather than an
// answer about the stream: no reply in time, no responders, or "JetStream
// system temporarily unavailable" (err_code 10008: its meta group has no
// leader).
func unanswered(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrClusterNotAvail
}

// jsErrClusterNotAvail is JetStream's "JetStream system temporarily
// unavailable": in a cluster, no meta leader to answer.
const jsErrClusterNotAvail = 10008

// streamCreated is the stream's creation time, zero if it cannot be read.
// It is the same on every node of a cluster (the stream's assignment) and
// across restarts on the same store.
func (f *Follower) streamCreated(ctx context.Context) time.Time {
	st, err := f.js.Stream(ctx, f.cfg.Stream)
	if err != nil {
		return time.Time{}
	}
	return st.CachedInfo().Created
}

// streamMissingAttempts is how many creations in a row, about 3 s apart
// at least (50+100+…+1000 ms), must find the stream missing before a
// Follower takes it for gone.
const streamMissingAttempts = 8

// open makes one consumer, named afresh, and starts pulling from it.
func (f *Follower) open(ctx context.Context) (jetstream.Consumer, error) {
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
		HeadersOnly:       f.cfg.HeadersOnly,
	}
	if f.resume > 0 {
		cc.DeliverPolicy, cc.OptStartSeq, cc.OptStartTime = jetstream.DeliverByStartSequencePolicy, f.resume, nil
	}
	f.opened = time.Now()
	cons, err := f.js.CreateConsumer(ctx, f.cfg.Stream, cc)
	if err != nil {
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			// It may yet be made, on a node that comes back.
			go f.delete(cc.Name, 10*time.Second)
		}
		return nil, err
	}
	it, err := cons.Messages(jetstream.PullHeartbeat(f.cfg.Heartbeat), jetstream.WithMessagesErrOnMissingHeartbeat(true))
	if err != nil {
		go f.delete(cc.Name, 10*time.Second)
		return nil, err
	}
	f.mu.Lock()
	stopped, reconnected := f.ctx.Err() != nil, f.reconnects != reconnects
	if !stopped && !reconnected {
		f.cons, f.it, f.delivered = cons, it, 0
	}
	f.mu.Unlock()
	switch {
	case stopped:
		// Made as Stop ran, which found no consumer to delete.
		it.Stop()
		f.delete(cc.Name, time.Second)
		return nil, jetstream.ErrMsgIteratorClosed
	case reconnected:
		it.Stop()
		go f.delete(cc.Name, 10*time.Second)
		return nil, errReconnected
	}
	return cons, nil
}

var errReconnected = errors.New("reconnected while the consumer was made")
