package kvlease

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/kvlease/follow"
)

// EventType says what happened to a lease.
type EventType int

const (
	// EventGranted: a new tenure began. With history 1 a renewal replaces
	// the grant in the stream, so a watcher that fell behind may first see
	// a tenure through a renewal: that is reported as EventGranted too (its
	// Revision is then the renewal's; Token is the tenure's, as always).
	EventGranted EventType = iota + 1
	// EventRenewed: the current tenure was extended.
	EventRenewed
	// EventReleased: the holder ended its tenure.
	EventReleased
	// EventRevoked: someone ended the tenure regardless of its holder.
	EventRevoked
	// EventExpired: the server lapsed the tenure because its TTL ran out.
	EventExpired
	// EventFreed: a lease that a revocation held (see [Store.Revoke]) was
	// freed before the hold ended, by its revoked holder's release or a
	// revocation with [FreeNow]. It ends no tenure (the revocation did);
	// the lease may be granted now. Only a watch with [ReportFrees]
	// reports it.
	EventFreed
)

var eventNames = [...]string{"", "granted", "renewed", "released", "revoked", "expired", "freed"}

func (t EventType) String() string {
	if t > 0 && int(t) < len(eventNames) {
		return eventNames[t]
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Ends reports whether the event ends a tenure.
func (t EventType) Ends() bool { return t >= EventReleased && t <= EventExpired }

// EventTypeOf is the type String names ("granted", …), 0 if none.
func EventTypeOf(name string) EventType {
	for i, n := range eventNames {
		if i > 0 && n == name {
			return EventType(i)
		}
	}
	return 0
}

// EndsTenure reports whether an event of type t for a tenure with token
// evToken ends the tenure of token, or begins a newer one (tokens grow
// with every tenure): what a holder's [WithRenewNow] hint is sent for.
func (t EventType) EndsTenure(evToken, token Token) bool {
	return t.Ends() && evToken == token || t == EventGranted && evToken > token
}

// Event is one change to a lease, read from the bucket's stream.
type Event struct {
	Type EventType
	Name string
	// Revision is the stream revision of this change.
	Revision uint64
	// Time is when the server stored the change (its wall clock); for the
	// end of a record the server kept past its TTL ([Store.EndOverdue]),
	// when that record expired.
	Time time.Time
	// Record is the tenure after a grant or renewal, or the tenure that
	// ended if this watcher saw it live; nil otherwise. It is shared with
	// the watcher, which builds the next renewal's record from it: read
	// it, do not modify it (copy it, and its Attributes, to change them).
	Record *Record
	// Holder and Token identify the tenure concerned, where known.
	Holder string
	Token  Token
	// GrantedAt is the grant time of the tenure concerned, where known
	// (of an ended tenure this watcher did not see live: from the
	// release's or revocation's tombstone).
	GrantedAt time.Time
	// Reason is a revocation's reason, or the reason of a server marker
	// other than a TTL's lapse (an expiry has none), or, for the end of a
	// tenure the watcher found gone after it was cut off from the server
	// (see [Store.Watch]), [UnseenEndReason].
	Reason string
	// Hold, on [EventRevoked], is how long from Time the revocation holds
	// the lease, no grant allowed, unless it is freed sooner ([EventFreed],
	// reported with [ReportFrees]); zero for one that frees it at once
	// ([FreeNow]). See [Store.Revoke].
	Hold time.Duration
	// Replay is true for events that describe the state when the watch
	// began rather than a change that happened since. A watch whose
	// consumer the server placed on a node still catching up (just
	// restarted) can replay a lease as that node had it, then what the
	// stream stored for it before the watch began: the end of a tenure
	// it replayed live then comes with Replay false, so that a fold of
	// the events is the state.
	Replay bool

	// replaced is the tombstone a grant replaced, as the grant carries it
	// (see Replaced).
	replaced *tombstone
}

// Replaced is, for a grant that replaced the tombstone of the tenure
// before it and carries it (a grant by a Store that knew it: see
// [Store.Watch]), that tenure's end as the tombstone has it: whether or
// not this watcher saw the tenure, so that one that took over from
// another ([ChangesAfter]) learns how a tenure it never saw live ended.
// Its Revision and Time are the tombstone's: for the end of a record the
// server kept past its TTL, which a grant takes over with no end stored
// in between, that record's own revision and expiry. Its Record is nil;
// a server marker names no tenure (Token 0). ok is false for other
// events, and for a grant that carries no end.
func (e Event) Replaced() (end Event, ok bool) {
	t := e.replaced
	if t == nil {
		return Event{}, false
	}
	end, ok = endEvent(Event{Name: e.Name, Revision: t.rev, Time: t.at}, t.header(), &tenures{}, false)
	return end, ok && end.Type.Ends()
}

// Lateness is, for an expiry the watcher saw live, how long after the
// server's deadline (StoredAt + TTL) the server wrote its expiry marker.
func (e Event) Lateness() (time.Duration, bool) {
	if e.Type != EventExpired || e.Record == nil {
		return 0, false
	}
	return e.Time.Sub(e.Record.ExpiresAt()), true
}

// WatchOption configures [Store.Watch]. An option returns an error for a
// value it cannot use; Watch returns that error.
type WatchOption func(*watchOptions) error

type watchOptions struct {
	updatesOnly  bool
	changesAfter uint64
	after        bool
	exact        bool
	frees        bool
}

// ReportFrees reports [EventFreed] too: when a lease a revocation held is
// freed early, by its holder's release or [FreeNow] (an election's
// candidates wait for it). No event marks a hold that simply runs out.
func ReportFrees() WatchOption {
	return func(o *watchOptions) error { o.frees = true; return nil }
}

// ExactName watches the one lease named by Watch's prefix, not every lease
// whose name begins with it: the server sends that lease's messages alone
// (a prefix is filtered on whole name tokens by the server and the rest
// here, so an election on "leader" replayed the whole bucket, and one on
// "x.billing" every lease under "x.").
func ExactName() WatchOption {
	return func(o *watchOptions) error { o.exact = true; return nil }
}

// UpdatesOnly skips the replay of current state: only changes from now on.
func UpdatesOnly() WatchOption {
	return func(o *watchOptions) error { o.updatesOnly = true; return nil }
}

// ChangesAfter replays the current state as usual, but reports every entry
// stored after revision rev as a change (Replay false), ends included,
// rather than as state: a watcher that takes over from another that had
// reported everything up to rev reports what that one did not. Entries the
// bucket no longer keeps (history 1: a renewal replaces the grant, a
// release rolls up its tenure) are not reported; an end whose tenure this
// watcher did not see names it from the tombstone where it can. It cannot
// be combined with [UpdatesOnly].
func ChangesAfter(rev uint64) WatchOption {
	return func(o *watchOptions) error { o.changesAfter, o.after = rev, true; return nil }
}

// Watcher delivers lease events. Events arrive in revision order, but
// for an end reported from the grant that replaced its tombstone (see
// [Store.Watch]), which comes just before that grant, and a grant reported
// from the end that rolled it up (a release right after the grant), which
// comes just before that end: each after events of other leases stored
// between the two.
type Watcher struct {
	// knownAfter is the revision past which the watch knows every tenure
	// granted (see Store.classify): 0 for a watch with the state, where
	// the stream stood when it began for one with UpdatesOnly.
	knownAfter uint64
	exact      bool // ExactName
	frees      bool // ReportFrees
	events     chan Event
	synced     chan struct{}
	done       chan struct{}
	stop       func()
	interrupts chan struct{}
	following  func() bool
	mu         sync.Mutex
	err        error
}

// Events returns the event channel, closed when the watcher stops. It holds
// 256 events; a reader that falls behind stalls delivery, not the server.
func (w *Watcher) Events() <-chan Event { return w.events }

// Interrupts receives a value (one is kept, not one per interruption)
// when the watch is cut off from the stream: as its connection is lost
// (nats.go reconnecting), or as it loses the consumer it reads the stream
// with while the connection is up (the node of the consumer died, two
// heartbeats missed ([WatchHeartbeat]), a gap), whichever comes first;
// once per interruption, not again at the reconnect that ends it. Until
// the watch has a consumer again on a connection that is up
// ([Watcher.Interrupted] reports false) it delivers nothing, and making
// one can take seconds (a cluster whose meta leader died elects another
// first). What was stored meanwhile is delivered then. A reader that
// must not wait that long for a change (an election's candidate, for its
// leader's release) can ask the store meanwhile. A quiet watch not
// interrupted is following, or was two heartbeats ago at most.
func (w *Watcher) Interrupts() <-chan struct{} { return w.interrupts }

// Interrupted reports whether the watch is cut off (see
// [Watcher.Interrupts]): its connection lost and not back, or its
// consumer lost and no other made yet; or whether it has stopped.
func (w *Watcher) Interrupted() bool { return !w.following() }

// Synced is closed once the watcher has caught up with the bucket: every
// lease live when the watch began has been delivered, as a Replay event or,
// if it changed meanwhile, as the change. Closed at once with [UpdatesOnly].
// [Watcher.CatchUp] reads the events up to that point.
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// CatchUp passes the watcher's events to apply, in order, until the
// watcher has caught up with the bucket ([Watcher.Synced]) and every event
// queued by then has been applied; then it returns nil, and later events
// stay in [Watcher.Events]. A fold of the events CatchUp applied is the
// state of the leases watched, as of a moment during the call. apply runs
// on the caller's goroutine.
//
// Errors: apply's, which stops CatchUp; [ErrUnavailable] wrapping ctx's
// error if ctx ends first; [Watcher.Err] if the watcher stopped before it
// caught up, or [ErrUnavailable] if it was stopped.
func (w *Watcher) CatchUp(ctx context.Context, apply func(Event) error) error {
	for caughtUp := false; ; {
		var ev Event
		var ok bool
		if caughtUp {
			select {
			case ev, ok = <-w.events:
			default:
				return nil
			}
		} else {
			select {
			case ev, ok = <-w.events:
			case <-w.synced:
				// Synced closes after the catching-up event was queued:
				// take what is buffered.
				caughtUp = true
				continue
			case <-ctx.Done():
				return translate("catch up", ctx.Err())
			}
		}
		if !ok {
			return w.endedEarly(ctx)
		}
		if err := apply(ev); err != nil {
			return err
		}
	}
}

// endedEarly explains a watcher that ended before CatchUp was done.
func (w *Watcher) endedEarly(ctx context.Context) error {
	if err := w.Err(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return translate("catch up", ctx.Err())
	}
	return fmt.Errorf("%w: the watch ended before it caught up", ErrUnavailable)
}

// Stop ends the watch and waits for its goroutine to finish.
func (w *Watcher) Stop() {
	w.stop()
	<-w.done
}

// Err returns why the watcher stopped, nil if by Stop or context.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// WatchHeartbeat is the idle heartbeat of a watch's consumer (and of the
// grantor's history follows): a consumer whose heartbeats stop for two of
// them is made anew, from where the watch was.
const WatchHeartbeat = time.Second

// Watch delivers events for leases whose names start with prefix ("" for
// all): first the current state (Replay events, then Synced closes), then
// every grant, renewal, release, revocation and expiry as the server stores
// it. It is driven by the server's messages, including the marker the server
// writes when a TTL lapses: nothing polls. The watch ends when ctx ends or
// Stop is called, or with [Watcher.Err]: the connection closed, the bucket
// gone ([ErrUnavailable]), or deleted and made anew ([ErrBucketReplaced]).
//
// The bucket keeps one message per lease (history 1), so a watcher that
// falls behind reads only the latest change of each lease it has not read
// yet: it may miss a renewal, or the tombstone of a tenure that the next
// grant replaced within milliseconds. A grant by a Store that knew that
// tombstone (it wrote it, or read it to grant: almost always) carries it,
// and then a watcher that saw the tenure live reports its end from it,
// just before the grant; otherwise it sees the grant and no end for the
// tenure before. Likewise a release or revocation right after its grant
// rolls the grant up before a watcher reads it: the end names the tenure
// (holder, token, grant time, duration, the grant's trace), and a watcher
// reports the grant from it, just before the end, if the tenure was
// granted after the watch began, or the watch replayed the state, or
// saw an earlier tenure of the lease live (with [UpdatesOnly], a tenure
// granted before the watch began and first seen by its end is reported
// by its end alone, and one first seen by a renewal as renewed). Events
// it does deliver are true and in order; decide on the store's
// compare-and-set, not on having seen an end.
func (s *Store) Watch(ctx context.Context, prefix string, opts ...WatchOption) (*Watcher, error) {
	if err := ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	var o watchOptions
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil watch option", ErrInvalidOption)
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	// Filter by subject on whole dot-separated tokens; the rest of the
	// prefix is matched here.
	filter := s.prefix + ">"
	switch i := strings.LastIndexByte(prefix, '.'); {
	case o.exact:
		if err := ValidateName(prefix); err != nil {
			return nil, err
		}
		filter = s.prefix + prefix
	case i >= 0:
		filter = s.prefix + prefix[:i+1] + ">"
	}
	rc := &reconciler{s: s, live: newTenures()}
	cfg := follow.Config{Stream: s.stream.CachedInfo().Config.Name, Filter: filter,
		Deliver: jetstream.DeliverLastPerSubjectPolicy, Heartbeat: WatchHeartbeat, OnReopen: rc.reopened}
	interrupts := make(chan struct{}, 1)
	cfg.OnDrop = func() {
		select {
		case interrupts <- struct{}{}:
		default:
		}
	}
	if o.updatesOnly {
		if o.after {
			return nil, fmt.Errorf("%w: ChangesAfter with UpdatesOnly", ErrInvalidOption)
		}
		cfg.Deliver = jetstream.DeliverNewPolicy
	}
	// What was stored before the watch began is state; anything after it
	// is a change, reported as one (an end included) even while the
	// replay is still being confirmed.
	var before uint64
	if !o.updatesOnly {
		// Bounded: a stream that has no leader yet (a forming cluster)
		// answers nothing at all, and the caller retries unavailability.
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := s.leaderGet(gctx, msgGetRequest{LastFor: filter})
		cancel()
		switch {
		case err == nil:
			before = m.Sequence
		case !errors.Is(err, errNoMessage):
			return nil, translate("watch", err)
		}
		if o.after {
			before = min(before, o.changesAfter)
		}
	}
	// A consumer that misses two heartbeats (its node died, or its first
	// pull went unanswered, as happens now and then in a cluster) is made
	// anew, placed afresh.
	fl, err := StartFollow(ctx, "watch", s.js, cfg)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		exact:      o.exact,
		frees:      o.frees,
		events:     make(chan Event, 256),
		synced:     make(chan struct{}),
		done:       make(chan struct{}),
		interrupts: interrupts,
		following:  fl.Following,
	}
	ctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	if o.updatesOnly {
		// Delivered: where the stream stood at the consumer's creation,
		// the last revision it does not deliver.
		w.knownAfter = fl.Info().Delivered.Stream
	}
	if o.updatesOnly || fl.Info().NumPending == 0 {
		close(w.synced)
	}
	context.AfterFunc(ctx, fl.Stop) // the follower has no context: stop it when ours ends
	rc.w, rc.ctx = w, ctx
	go w.run(ctx, s, fl, rc, prefix, filter, before)
	return w, nil
}

// Follow is a [follow.Follower] on a stream of the bucket's (the lease
// stream, or the grantor's history beside it) whose errors are this
// package's, as [JetStreamError] has them, but for one: a stream that is
// not found is [ErrUnavailable]. A consumer is made on a node the server
// picks, and a node that has just rejoined its cluster says its stream is
// not found until its copy is there; a bucket deleted under its users
// looks the same from a client, as it does to a write (no stream answers
// it). Made with [StartFollow].
type Follow struct {
	*follow.Follower
	op string
}

// StartFollow starts a [Follow] for op (named in its errors).
func StartFollow(ctx context.Context, op string, js jetstream.JetStream, cfg follow.Config) (Follow, error) {
	fl, err := follow.Start(ctx, js, cfg)
	if err != nil {
		return Follow{}, followError(op, err)
	}
	return Follow{Follower: fl, op: op}, nil
}

// Next is [follow.Follower.Next] with its errors translated.
func (f Follow) Next() (jetstream.Msg, error) {
	m, err := f.Follower.Next()
	if err != nil {
		return nil, followError(f.op, err)
	}
	return m, nil
}

func followError(op string, err error) error {
	if errors.Is(err, follow.ErrStreamReplaced) {
		return fmt.Errorf("%w: %s: %w", ErrBucketReplaced, op, err)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w: %s: %w (a node without its copy of the stream yet, or the bucket deleted?)", ErrUnavailable, op, err)
	}
	return JetStreamError(op, err)
}

// run delivers events. The replay ends when the consumer has caught up. It
// cannot end at a fixed revision: with history 1 a replayed entry that is
// renewed meanwhile is replaced by its renewal, which is delivered in its
// place with a later revision. Nor is the server's "nothing pending" on a
// message enough: a lease renewed while the consumer replays the state it
// took at its creation is skipped there, and its renewal, appended after
// that state, can still be to come when the last replayed message says
// nothing is pending (seen: List missing 1 of 30 leases renewed during the
// replay). So a replay that looks done is confirmed with a read of the
// newest message under the filter: done once the consumer has delivered up
// to it (a message replaced since is replaced by a later one, which the
// next confirmation covers).
//
// Only messages stored before the watch began (at or below before) are
// replayed state; a change stored after it is reported as a change, its
// end included, whether or not the replay has been confirmed yet.
func (w *Watcher) run(ctx context.Context, s *Store, fl Follow, rc *reconciler, prefix, filter string, before uint64) {
	defer close(w.done)
	defer close(w.events)
	defer w.stop()
	defer fl.Stop() // deletes its consumer before Stop returns
	live := rc.live
	synced := func() bool {
		select {
		case <-w.synced:
			return true
		default:
			return false
		}
	}
	confirmations := 0
	for {
		m, err := fl.Next()
		if err != nil {
			if ctx.Err() == nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
			}
			return
		}
		md, err := m.Metadata()
		if err != nil {
			continue
		}
		replay := !synced() && md.Sequence.Stream <= before
		rc.delivered(md)
		if name := strings.TrimPrefix(m.Subject(), s.prefix); strings.HasPrefix(name, prefix) && (!w.exact || name == prefix) && !rc.reported(name, md, m) {
			if ev, before, ok := s.classify(name, md, m, live, replay, w.knownAfter); ok {
				for _, e := range []*Event{before, &ev} {
					if e == nil || e.Type == EventFreed && !w.frees {
						continue
					}
					select {
					case w.events <- *e:
					case <-ctx.Done():
						return
					}
				}
			}
		}
		if !synced() && md.NumPending == 0 && w.caughtUp(ctx, s, filter, md.Sequence.Stream, &confirmations) {
			close(w.synced)
		}
		if rc.retryDue() && !rc.reconcile(nil) {
			return
		}
	}
}

// maxSyncConfirmations bounds the confirmations of one replay: under a
// stream of writes under the filter each confirmation can find a newer
// message, and a replay must end. Past it the server's "nothing pending"
// is taken as it is, as it was before confirmations.
const maxSyncConfirmations = 8

// caughtUp reports whether a consumer that has delivered up to sequence
// delivered has delivered every message under filter: the newest one is
// not after it. A failed read counts as caught up (the server said nothing
// is pending).
func (w *Watcher) caughtUp(ctx context.Context, s *Store, filter string, delivered uint64, confirmations *int) bool {
	if *confirmations >= maxSyncConfirmations {
		return true
	}
	*confirmations++
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := s.leaderGet(rctx, msgGetRequest{LastFor: filter})
	return err != nil || m.Sequence <= delivered
}

// tenures are the tenures a watcher has seen begin and not end: the last
// record of each, and, if that record was a renewal's, the stored value it
// was decoded from. A holder's renewals store the same value again and
// again (what changes, the revision, time and TTL, is the message's), so a
// renewal whose value is byte for byte the one before is not decoded
// again: decoding every renewal was most of a watcher's CPU
// (BenchmarkClassifyRenewal).
type tenures struct {
	recs map[string]*Record
	raws map[string][]byte // of the names whose record is a renewal's
}

func newTenures() *tenures {
	return &tenures{recs: make(map[string]*Record), raws: make(map[string][]byte)}
}

// put records rec, decoded from raw (retained only for a renewal's).
// own, if not nil, is the Store's own copy of the value it wrote at that
// revision (revCache.renewal): retained instead of a copy of raw when the
// two are equal, so that a node renewing and watching the same leases
// keeps each renewal's value once.
func (t *tenures) put(rec *Record, raw, own []byte) {
	t.recs[rec.Name] = rec
	if uint64(rec.Token) == rec.Revision {
		delete(t.raws, rec.Name) // a grant's value names no token: no renewal stores it again
		return
	}
	switch old, ok := t.raws[rec.Name]; {
	case own != nil && bytes.Equal(own, raw):
		// Also in place of a copy kept when the watch saw the first
		// renewal before the Store had its answer.
		t.raws[rec.Name] = own
	case !ok || !bytes.Equal(old, raw):
		t.raws[rec.Name] = bytes.Clone(raw)
	}
}

// end forgets name's tenure and returns its last record (nil if none).
func (t *tenures) end(name string) *Record {
	prev := t.recs[name]
	delete(t.recs, name)
	delete(t.raws, name)
	return prev
}

// record returns the record of the put of name stored at rev (time
// stored, TTL ttl) with value data: the tenure's last record with those
// three changed if data is that record's value, else decoded.
func (t *tenures) record(name string, rev uint64, stored time.Time, ttl time.Duration, data []byte) (Record, error) {
	if raw, ok := t.raws[name]; ok && bytes.Equal(raw, data) {
		rec := *t.recs[name] // its Attributes shared: see Event.Record
		rec.Revision, rec.StoredAt, rec.TTL = rev, stored, ttl
		return rec, nil
	}
	return decodeRecord(name, rev, stored, ttl, data)
}

// classify turns one stored message into an event, updating live.
// During replay only live tenures are reported: how a lease ended before the
// watch began is history, not state.
//
// knownAfter says which tenures live holds every one of: those whose
// tokens are past it, granted since the watch began (0 for a watch that
// replayed the state first: every tenure live since it began). A renewal
// of such a tenure not in live is a tenure whose grant this watcher
// missed (the renewal replaced it), and an end of one a tenure whose
// grant the end rolled up.
//
// A grant that replaced a tombstone this watcher did not see (the bucket
// keeps one message per lease, so a watch that lags past a release sees
// only the next grant) carries that tombstone's headers (see
// [tombstone]): if this watcher saw the tenure live, it first reports the
// tenure's end from them, as the tombstone would have. Likewise an end
// whose grant this watcher never read (the end rolled it up) is reported
// after that grant, made from the end's headers. before is that event,
// delivered before ev.
func (s *Store) classify(name string, md *jetstream.MsgMetadata, m jetstream.Msg, live *tenures, replay bool, knownAfter uint64) (ev Event, before *Event, ok bool) {
	h := m.Headers()
	ev = Event{Name: name, Revision: md.Sequence.Stream, Time: md.Timestamp, Replay: replay}
	if !Removed(h) {
		rec, err := live.record(name, ev.Revision, ev.Time, parseTTL(h.Get(jetstream.MsgTTLHeader)), m.Data())
		if err != nil {
			s.log.Warn("skipping undecodable lease entry", "name", name, "revision", ev.Revision, "err", err)
			return Event{}, nil, false
		}
		prev := live.recs[name]
		changed := prev != nil && prev.Token != rec.Token // a tenure this watcher has not seen live
		// The tombstone comes after the tenure's last record seen, or (the
		// end of a record the server kept past its TTL: Store.EndOverdue)
		// is that record's own revision.
		// A replayed grant can follow a tenure this watcher has reported
		// live only if that report came from a node behind the stream
		// (see endEvent): the end is reported all the same. Reported or
		// not, the end is the grant event's (Event.Replaced).
		// Only the end of that tenure: a tombstone naming another (one
		// begun and ended while this watcher lagged) was reported as the
		// end of a tenure never granted, and the one live was dropped
		// unended (found by an outside client, through a proxy cut). Such
		// a tenure is only in the history, as a lag's are; the grant
		// carries its end all the same (Event.Replaced).
		t, carried := replacedTombstone(h)
		if carried && prev != nil && prev.Token != rec.Token && t.rev >= prev.Revision && t.rev < ev.Revision && t.ends(prev.Token) {
			if e, ok := endEvent(Event{Name: name, Revision: t.rev, Time: t.at}, t.header(), live, false); ok {
				before = &e
			}
			prev = nil
		}
		if carried {
			ev.replaced = t
		}
		// A token other than that of the tenure this watcher has live is a
		// new tenure whether or not it knows every tenure: a watch with
		// UpdatesOnly reported it as a renewal of a tenure it never saw
		// granted (found by an outside client). So is one granted since
		// the watch began that it has not seen: such a watch reported a
		// tenure granted and renewed while it was cut off as renewed,
		// even after it had seen the lease end.
		ev.Type = EventRenewed
		if uint64(rec.Token) == rec.Revision || !replay && (prev == nil && uint64(rec.Token) > knownAfter || changed) {
			ev.Type = EventGranted // or the first sight of a tenure whose grant was replaced unseen
		}
		ev.Record, ev.Holder, ev.Token, ev.GrantedAt = &rec, rec.Holder, rec.Token, rec.GrantedAt
		var own []byte
		if ev.Type == EventRenewed {
			own = s.cache.renewal(name, ev.Revision, rec.Duration)
		}
		live.put(&rec, m.Data(), own)
		return ev, before, true
	}
	// An end of ours naming a tenure this watcher never saw live, though it
	// knows every tenure granted since it began and this one is, or saw an
	// earlier tenure of the lease live (a watch with UpdatesOnly reported
	// the end alone; found by an outside client): the release (or
	// revocation) came so
	// soon after the grant that it rolled the grant up before this
	// watcher read it. The grant is reported first, from the end's headers.
	var missed *Event
	if tok := Token(parseUint(h.Get(hdrToken))); tok != 0 && !replay && h.Get(hdrOp) != opFree && !endedAgain(h) {
		if prev := live.recs[name]; prev == nil && uint64(tok) > knownAfter || prev != nil && prev.Token < tok {
			g := missedGrant(name, tok, h, ev.Time)
			missed = &g
		}
	}
	ev, ok = endEvent(ev, h, live, replay)
	return ev, missed, ok
}

// missedGrant is the grant of tenure tok of name, which an end with
// headers h, stored at end, names (see classify): its revision is its
// token, its time the grant time the end gives.
func missedGrant(name string, tok Token, h nats.Header, end time.Time) Event {
	granted, err := time.Parse(time.RFC3339Nano, h.Get(hdrGranted))
	if err != nil {
		granted = end
	}
	rec := Record{Name: name, Holder: h.Get(hdrHolder), Token: tok, Revision: uint64(tok), StoredAt: granted,
		GrantedAt: granted, Duration: time.Duration(parseUint(h.Get(hdrDuration))) * time.Millisecond,
		GrantTrace: h.Get(hdrTrace)}
	return Event{Type: EventGranted, Name: name, Revision: uint64(tok), Time: granted, Holder: rec.Holder,
		Token: tok, GrantedAt: granted, Record: &rec}
}

// ends reports whether t can be the end of tenure tok: it names that
// tenure, or none (a server's marker, see endEvent).
func (t *tombstone) ends(tok Token) bool {
	named := Token(parseUint(t.get(hdrToken)))
	return named == 0 || named == tok
}

// endEvent is the event of a tombstone or marker with headers h, stored
// as ev says (name, revision, time), updating live.
func endEvent(ev Event, h nats.Header, live *tenures, replay bool) (Event, bool) {
	prev := live.end(ev.Name)
	if replay {
		if prev == nil {
			return Event{}, false // how a lease ended before the watch began is history
		}
		// The watcher has reported this tenure live, and the stream had
		// ended it before the watch began: the consumer read a copy of
		// the stream that was behind (the server placed it on a node
		// catching up after a restart, which first delivered the lease as
		// it was, then its end). Dropped, the end left the lease live in
		// the watcher's state for good (found by an outside client: a
		// watch through a just-restarted node, under load, showed leases
		// released while the node was down as live and never their
		// release). It is reported as a change, so that a fold of the
		// events is the state.
		ev.Replay = false
	}
	if prev == nil && endedAgain(h) {
		return Event{}, false // it saw the tenure end, not its return
	}
	if reason := h.Get(jetstream.MarkerReasonHeader); reason != "" {
		// A marker names no tenure. Attribute it to the one this watcher
		// saw last only if the timing fits that tenure's expiry: after a
		// gap in delivery (history is 1), the tenure that lapsed may be one
		// this watcher never saw. End events are best-effort across gaps.
		if prev != nil && reason == markerMaxAg &&
			!ev.Time.Before(prev.ExpiresAt().Add(-time.Second)) && ev.Time.Before(prev.ExpiresAt().Add(5*time.Second)) {
			ev.Record, ev.Holder, ev.Token, ev.GrantedAt = prev, prev.Holder, prev.Token, prev.GrantedAt
		}
		// A server marker: the server writes one when a live entry's TTL
		// lapses (not when a release tombstone's own TTL does, checked on
		// v2.15.2), or for a stream purge or removal.
		ev.Type, ev.Reason = EventRevoked, reason
		if reason == markerMaxAg {
			ev.Type, ev.Reason = EventExpired, ""
		}
		return ev, true
	}
	ev.Type, ev.Reason = EventRevoked, h.Get(hdrReason)
	switch h.Get(hdrOp) {
	case "release":
		ev.Type = EventReleased
	case opExpire: // EndOverdue: the expiry the server lost
		ev.Type = EventExpired
		if at, err := time.Parse(time.RFC3339Nano, h.Get(hdrExpired)); err == nil && at.Before(ev.Time) {
			ev.Time = at
		}
	case opEndAgain: // EndResurrected
		ev.Reason = ResurrectedReason
	case opFree:
		// The lease a revocation held was freed: the revocation ended the
		// tenure, and only a watcher that missed it (it still has the
		// tenure live) reports that end, from these headers.
		if tok := Token(parseUint(h.Get(hdrToken))); prev == nil || prev.Token != tok {
			ev.Type, ev.Reason, ev.Holder, ev.Token = EventFreed, "", h.Get(hdrHolder), tok
			return ev, true
		}
	case "revoke":
		ev.Hold = time.Duration(parseUint(h.Get(hdrHold))) * time.Millisecond
	default: // a plain KV delete or purge by some other client
		ev.Reason = "kv " + strings.ToLower(h.Get(hdrKVOp))
	}
	if tok := Token(parseUint(h.Get(hdrToken))); tok != 0 {
		// Our tombstone names the tenure it ended, which after a gap in
		// delivery (history is 1) may be a later one than this watcher saw
		// last: the headers decide, the last record only if it is that
		// tenure's.
		ev.Holder, ev.Token = h.Get(hdrHolder), tok
		ev.GrantedAt, _ = time.Parse(time.RFC3339Nano, h.Get(hdrGranted))
		if prev != nil && prev.Token == tok {
			ev.Record, ev.GrantedAt = prev, prev.GrantedAt
		}
	} else if prev != nil {
		ev.Record, ev.Holder, ev.Token, ev.GrantedAt = prev, prev.Holder, prev.Token, prev.GrantedAt
	}
	return ev, true
}

// endedAgain reports whether h are the headers of an end
// [Store.EndResurrected] wrote: of a tenure that had ended before.
func endedAgain(h nats.Header) bool { return h.Get(hdrOp) == opEndAgain }

func parseUint(s string) uint64 {
	var n uint64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// UnseenEndReason is the Reason of an end a watcher reports for a tenure
// it had reported live and, after it was cut off from the server, found
// gone with no end left in the stream to read (see [Store.Watch]): the
// end's marker or tombstone lapsed meanwhile, so how and when the tenure
// ended is not known. Such an end is reported as [EventExpired], its
// Time the tenure's expiry by its last record seen, or the time the
// watcher found it gone if earlier.
const UnseenEndReason = "the watch did not see this tenure end: cut off from the NATS server, it found the lease gone, its end's marker or tombstone lapsed meanwhile"

// ttlFloor is the shortest TTL the server keeps (DESIGN §2, item 2): no
// expiry marker or tombstone lapses sooner after it was stored.
// reconcileClockSlack is how far apart the clocks of the stream's leader
// (which stamps messages) and the node of a consumer (which stamps its
// creation) may be for a reopen's gap to be measured right.
const (
	ttlFloor            = time.Second
	reconcileClockSlack = 500 * time.Millisecond
	reconcileReadTime   = 2 * time.Second
	reconcileRetry      = time.Second
)

// reconciler finds the tenures a watcher holds live whose end it can no
// longer read. A watch's consumer made anew after a cut-off resumes after
// the last message delivered, but a tenure that lapsed meanwhile, and
// whose expiry marker lapsed too (the bucket's marker TTL; a release's
// tombstone likewise), left nothing in the stream: the watcher kept it
// live for good (`leased watch` and a registry showed lapsed leases as
// live). So, as a Kubernetes informer relists after a watch gap, after a
// reopen whose gap is long enough for anything to have lapsed the
// reconciler reads the last entry of each tenure in live from the stream
// leader and reports the end of those found gone. Its methods run on the
// watcher's goroutine (the follower calls reopened from Next).
type reconciler struct {
	s    *Store
	w    *Watcher
	ctx  context.Context
	live *tenures

	// lastSeq and lastStored are the stream sequence and store time (the
	// server's clock) of the last message the follower returned.
	lastSeq    uint64
	lastStored time.Time
	// retry are the names whose reads failed, to read again after
	// retryAt (or at the next reopen).
	retry   []string
	retryAt time.Time
	// unseen are the names whose ends were reported unseen, each with the
	// stream's last sequence when it was: an end of the name stored by
	// then that the consumer delivers after all (it had it buffered) is
	// that same end, not reported again.
	unseen map[string]uint64
}

func (rc *reconciler) delivered(md *jetstream.MsgMetadata) {
	rc.lastSeq, rc.lastStored = md.Sequence.Stream, md.Timestamp
}

// reported reports whether m, for name, is an end already reported as
// unseen (see unseen).
func (rc *reconciler) reported(name string, md *jetstream.MsgMetadata, m jetstream.Msg) bool {
	upTo, ok := rc.unseen[name]
	if !ok {
		return false
	}
	if md.Sequence.Stream > upTo || rc.live.recs[name] != nil {
		delete(rc.unseen, name)
		return false
	}
	return Removed(m.Headers())
}

// reopened reconciles live after the follower made a consumer anew, if
// something can have lapsed unseen: a marker or tombstone the new
// consumer will not find was stored after the last message delivered
// (lastStored) and lapsed, a marker TTL later (see unseenGap), before the
// consumer read it. Otherwise only the names whose reads failed before
// are read: a relist reads every live tenure, and a grantor's observer
// watches all of them (100,000 reads after every failover of a node, had
// it read after gaps of a second).
func (rc *reconciler) reopened(info *jetstream.ConsumerInfo) {
	if len(rc.live.recs) == 0 {
		rc.retry = nil
		return
	}
	var names []string
	if info == nil || info.Created.IsZero() || info.Created.Sub(rc.lastStored) >= rc.s.unseenGap() {
		names = make([]string, 0, len(rc.live.recs))
		for name := range rc.live.recs {
			names = append(names, name)
		}
	}
	rc.reconcile(names)
}

// unseenGap is the shortest gap in a watch's deliveries across which an
// end can have lapsed unseen: the shorter of the bucket's marker TTL
// (expiry markers) and this Store's (the tombstones it writes; a Store
// that writes with a shorter one than the bucket's and the watcher's is
// not covered), less the clock slack, and never below the server's floor.
func (s *Store) unseenGap() time.Duration {
	d := s.o.markerTTL
	if b := s.stream.CachedInfo().Config.SubjectDeleteMarkerTTL; b > 0 && b < d {
		d = b
	}
	return max(d, ttlFloor) - reconcileClockSlack
}

// retryDue reports whether names whose reads failed are to be read again.
func (rc *reconciler) retryDue() bool {
	return len(rc.retry) > 0 && !time.Now().Before(rc.retryAt)
}

// reconcile reads names (nil: those to retry) still live through the
// stream leader and reports the end of each found gone: the subject
// empty, or holding another tenure whose grant does not carry this one's
// end (the consumer reports neither). An entry after the last message
// delivered is left for the consumer to deliver. The first read that
// fails stops the pass (the server is likely unreachable): that name and
// those after it are read again after reconcileRetry, or at the next
// reopen. It returns false if the watch ended while it sent an event.
func (rc *reconciler) reconcile(names []string) bool {
	if names == nil {
		names = rc.retry
	}
	rc.retry = nil
	if len(names) == 0 {
		return true
	}
	fail := func(rest []string) bool {
		rc.retry, rc.retryAt = append(rc.retry, rest...), time.Now().Add(reconcileRetry)
		return true
	}
	// A read is evidence, not truth: a leader behind what this watch has
	// delivered (a node resumed from a pause) would answer from its old
	// state, and a tenure granted since would look gone.
	ctx, cancel := context.WithTimeout(rc.ctx, reconcileReadTime)
	info, err := rc.s.stream.Info(ctx)
	cancel()
	if err != nil || info.State.LastSeq < rc.lastSeq {
		return fail(names)
	}
	for k, u := range rc.unseen {
		if u <= rc.lastSeq {
			delete(rc.unseen, k)
		}
	}
	for i, name := range names {
		prev := rc.live.recs[name]
		if prev == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(rc.ctx, reconcileReadTime)
		m, err := rc.s.leaderGet(ctx, msgGetRequest{LastFor: rc.s.prefix + name})
		cancel()
		switch {
		case errors.Is(err, errNoMessage):
		case err != nil:
			if rc.ctx.Err() != nil {
				return false
			}
			return fail(names[i:])
		case m.Sequence <= rc.lastSeq || Removed(m.Header):
			continue // the tenure as delivered, or an entry the consumer delivers
		default:
			rec, err := rc.s.decode(name, m)
			t, carried := replacedTombstone(m.Header)
			if err != nil || rec.Token == prev.Token || carried && t.rev >= prev.Revision && t.ends(prev.Token) {
				continue // its renewal, or a grant the consumer reports the end from
			}
		}
		ev := Event{Type: EventExpired, Name: name, Revision: rc.lastSeq, Time: prev.ExpiresAt(),
			Record: prev, Holder: prev.Holder, Token: prev.Token, GrantedAt: prev.GrantedAt, Reason: UnseenEndReason}
		if now := info.TimeStamp; !now.IsZero() && now.Before(ev.Time) {
			ev.Time = now
		}
		rc.live.end(name)
		if rc.unseen == nil {
			rc.unseen = make(map[string]uint64)
		}
		rc.unseen[name] = info.State.LastSeq
		rc.s.log.Info("lease watch found a tenure gone whose end it did not see", "lease", name,
			"holder", prev.Holder, "token", prev.Token)
		select {
		case rc.w.events <- ev:
		case <-rc.ctx.Done():
			return false
		}
	}
	return true
}
