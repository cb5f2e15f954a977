package grantor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/telemetry"
)

// ObserverLease is the lease, in the service's own bucket, whose holder is
// the cluster's observer: the one grantor node that reports the bucket's
// changes (change events on lease.events.v1.<name>, ownership-change and
// end spans, change metrics, the history), so that each change is reported
// once, not once per node. Another node takes over when the observer dies,
// within about [ObserverDuration].
const ObserverLease = api.ObserverLease

// ReservedPrefix begins the names of the leases the grantor keeps for
// itself in its bucket: the service refuses to grant them, and leaves them
// out of lists, per-holder counts and the live-lease gauge.
const ReservedPrefix = api.ReservedPrefix

func reserved(name string) bool { return strings.HasPrefix(name, ReservedPrefix) }

// ObserverDuration is the observer lease's duration D, within the store's
// range of durations (serve's --min-ttl and --max-ttl).
const ObserverDuration = 5 * time.Second

// observerDuration is ObserverDuration within [minD, maxD]: a store that
// grants nothing as long refused the observer's campaign, forever, and the
// service never became ready.
func observerDuration(minD, maxD time.Duration) time.Duration {
	return min(max(ObserverDuration, minD), maxD)
}

// campaignFirstWait and campaignMaxWait bound the pause between failed
// campaigns (see campaign).
const (
	campaignFirstWait = 50 * time.Millisecond
	campaignMaxWait   = 2 * time.Second
)

// attemptTimeout bounds each JetStream request of the observer, which
// retries while JetStream is unavailable.
const attemptTimeout = 2 * time.Second

// WithHistoryRetention sets how long the history stream keeps records; a
// duration under [history.MinRetention] is an error. Without it a service
// leaves the stream's retention as it is, and a new stream keeps
// [history.DefaultRetention].
func WithHistoryRetention(d time.Duration) Option {
	return func(s *Service) error {
		if d < history.MinRetention {
			return fmt.Errorf("%w: history retention %v, want at least %v", ErrConfig, d, history.MinRetention)
		}
		s.retention = d
		return nil
	}
}

// WithHistoryMaxBytes bounds the history stream's size: past it the oldest
// records are dropped (-1: no bound; see [history.Options].MaxBytes, which
// refuses other values under [history.MinMaxBytes] as this does). Without
// it a service leaves the stream's bound as it is, and a new stream has
// none.
func WithHistoryMaxBytes(n int64) Option {
	return func(s *Service) error {
		if n != -1 && n < history.MinMaxBytes {
			return fmt.Errorf("%w: history max bytes %d, want -1 (none) or at least %d", ErrConfig, n, history.MinMaxBytes)
		}
		s.historyMaxBytes = n
		return nil
	}
}

// WithSuccession names this service instance in the observer lease's
// attributes (default: a new [nuid]) and, if predecessor is not empty,
// says that the instance so named has stopped: an observer lease it still
// holds under this node's name ([WithNodeName]) is ended when the service
// starts, rather than waited out. The
// observer would otherwise be back only when that lease lapsed (about
// [ObserverDuration]), and a lease granted, ended and granted again
// meanwhile would have only its last tenure in the history. serve passes
// the names its embedded server keeps in the data directory
// (embedded.Server.Instance and Predecessor), which its lock makes sure
// of: a predecessor must not be a process that may still run.
func WithSuccession(instance, predecessor string) Option {
	return func(s *Service) error {
		if instance == "" || instance == predecessor {
			return fmt.Errorf("%w: succession of %q after %q: an instance must be named, and not as its predecessor", ErrConfig, instance, predecessor)
		}
		s.instance, s.predecessor = instance, predecessor
		return nil
	}
}

// observer runs the service's campaign for [ObserverLease] and, while it
// leads, the observation.
type observer struct {
	s         *Service
	hist      *history.Stream
	flaps     *telemetry.FlapDetector // of the tenures it reports
	candidate string
	instance  string        // a unique id in the observer lease's attributes: two nodes may share a name
	ready     chan struct{} // closed once an observer is known (this node or another)
	readyOnce sync.Once

	mu    sync.Mutex
	state string // "observing", "standby", for Observing
	stop  context.CancelFunc
	done  chan struct{}

	// pending are the records of the changes handled since the last
	// flush, in order (the observing goroutine's own).
	pending []pendingRecord
	// ended holds, by lease, the tenure whose end this observer saw last
	// and when, until the next grant of the lease (or the sweep after its
	// tombstone would have lapsed): a grant that carries an end not there
	// carries one the observer missed (see endReplaced). The observing
	// goroutine's own.
	ended     map[string]seenEnd
	endedPeak int // the most ended has held since it was last made anew
}

// seenEnd is a tenure whose end the observer saw, and when.
type seenEnd struct {
	token kvlease.Token
	at    time.Time
}

// sawEnd notes that the observer saw the end of tenure tok of lease name.
func (o *observer) sawEnd(name string, tok kvlease.Token) {
	if o.ended == nil {
		o.ended = map[string]seenEnd{}
	}
	o.ended[name] = seenEnd{token: tok, at: time.Now()}
	o.endedPeak = max(o.endedPeak, len(o.ended))
}

// forgetEnds drops the ends seen longer ago than a tombstone lives: no
// grant carries them any more (and one that did would be looked up in the
// history, not recorded twice).
func (o *observer) forgetEnds(now time.Time) {
	for name, e := range o.ended {
		if now.Sub(e.at) > kvlease.DefaultMarkerTTL+time.Minute {
			delete(o.ended, name)
		}
	}
	// A Go map keeps the room it grew to: after a churn of distinct names
	// stopped, an idle serve kept 16 MB here for good. Made anew once it
	// holds a quarter of that.
	if len(o.ended) < o.endedPeak/4 {
		o.ended = maps.Collect(maps.All(o.ended))
		o.endedPeak = len(o.ended)
	}
}

// pendingRecord is a history record waiting to be appended, and whether
// its change is published once it is.
type pendingRecord struct {
	rec      history.Record
	ev       kvlease.Event
	publish  bool
	n        int // the grant's flap count
	flapping bool
}

// maxPending bounds the records one flush appends (as one batch), and
// historyLinger how long a record waits for more: a change is in the
// history, and announced, at most that much later than without it.
const (
	maxPending    = 256
	historyLinger = 2 * time.Millisecond
)

func (o *observer) markReady() { o.readyOnce.Do(func() { close(o.ready) }) }

// Observing reports whether this node is the cluster's observer now.
func (s *Service) Observing() bool {
	if s.obs == nil {
		return false
	}
	s.obs.mu.Lock()
	defer s.obs.mu.Unlock()
	return s.obs.state == "observing"
}

// History returns the service's history stream (nil before Start).
func (s *Service) History() *history.Stream {
	if s.obs == nil {
		return nil
	}
	return s.obs.hist
}

// historyOptions are those of the bucket's history stream: created if
// missing, with the store's replicas, and appended to in batches only if
// the store batches its own writes.
func (s *Service) historyOptions() history.Options {
	return history.Options{Retention: s.retention, MaxBytes: s.historyMaxBytes, Replicas: s.store.Replicas(), Create: true,
		Singles: !s.store.Batching()}
}

// startObserver opens the history stream and starts the campaign; it
// returns once this node observes or another node is known to.
func (s *Service) startObserver(ctx context.Context) error {
	hist, err := kvlease.RetryUnavailable(ctx, 2*time.Second, func(err error) {
		s.log.Info("waiting for JetStream to open the history stream", "err", err)
	}, func() (*history.Stream, error) {
		// Bounded: a JetStream API request no server answers (a cluster
		// still forming, nodes creating the stream at once) waits for ever.
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		defer cancel()
		return history.Open(actx, s.store.JetStream(), s.store.Bucket(), s.historyOptions())
	})
	if err != nil {
		return err
	}
	if was := hist.Shortened(); was > 0 {
		s.log.Warn("shortened the history's retention: records older than it are deleted", "retention", s.historyOptions().Retention,
			"was", was)
	}
	e, err := election.New(s.store, ObserverLease)
	if err != nil {
		return err
	}
	candidate := s.node
	if candidate == "" {
		candidate = "grantor-" + nuid.Next()
	}
	rctx, stop := context.WithCancel(kvlease.GrantorContext(context.WithoutCancel(ctx)))
	o := &observer{s: s, hist: hist, candidate: candidate, instance: cmp.Or(s.instance, nuid.Next()), ready: make(chan struct{}), stop: stop,
		flaps: telemetry.NewFlapDetector(s.flaps.Window, s.flaps.Threshold),
		done:  make(chan struct{}), state: "standby"}
	s.obs = o
	if s.predecessor != "" {
		o.endPredecessor(ctx)
	}
	go o.campaign(rctx, e)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go o.awaitObserver(wctx)
	select {
	case <-o.ready:
		return nil
	case <-ctx.Done():
		o.halt()
		return ctx.Err()
	}
}

// instanceAttr is the observer lease's attribute naming the service
// instance that holds it.
const instanceAttr = "instance"

// awaitObserver marks the observer known once another service instance
// holds the observer lease (a standby's campaign blocks until the lease is
// free; this instance marks itself once it observes). Another instance may
// bear this node's name: two grantors on one host with --nats-url both
// default to the host name.
func (o *observer) awaitObserver(ctx context.Context) {
	w, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (*kvlease.Watcher, error) {
		return o.s.store.Watch(ctx, ObserverLease)
	})
	if err != nil {
		return
	}
	defer w.Stop()
	for ev := range w.Events() {
		if ev.Name == ObserverLease && !ev.Type.Ends() && ev.Record != nil && ev.Record.Attributes[instanceAttr] != o.instance {
			o.markReady()
			return
		}
	}
}

// endPredecessor ends the observer lease if the service's predecessor
// (WithSuccession), which has stopped, holds it under this node's name. Failing that (JetStream
// unavailable), the lease is waited out, as any other node's.
func (o *observer) endPredecessor(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	rec, err := o.s.store.Get(ctx, ObserverLease)
	// The node's name too: a data directory restored from a copy made
	// while its server ran, on another node, names a live instance.
	if err != nil || rec.Attributes[instanceAttr] != o.s.predecessor || rec.Holder != o.candidate {
		if err != nil && !errors.Is(err, kvlease.ErrNotFound) {
			o.s.log.Warn("could not read the observer lease to end its stopped predecessor's; waiting for it to lapse", "err", err)
		}
		return
	}
	switch ended, err := o.s.store.EndAbandoned(ctx, rec, predecessorReason); {
	case err != nil:
		o.s.log.Warn("could not end the observer lease of this node's stopped predecessor; waiting for it to lapse", "err", err)
	case ended:
		o.s.log.Info("ended the observer lease of this node's stopped predecessor", "instance", o.s.predecessor, "token", rec.Token)
	}
}

// predecessorReason is the reason of the observer lease's revocation by
// endPredecessor.
const predecessorReason = "its holder, the grantor that used this data directory before, had stopped"

// halt ends the campaign and, if observing, resigns.
func (o *observer) halt() {
	o.stop()
	<-o.done
}

func (o *observer) campaign(ctx context.Context, e *election.Election) {
	defer close(o.done)
	// A campaign or an observation that fails at once (JetStream answers
	// "unavailable" while a cluster recovers) is tried again after a pause
	// that doubles up to campaignMaxWait: without it this loop spun, and a
	// fault run logged 100,000 failures a node while starving the nodes
	// it shared two cores with.
	wait := campaignFirstWait
	pause := func() {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(2*wait, campaignMaxWait)
	}
	for ctx.Err() == nil {
		lead, err := e.Campaign(ctx, o.candidate, observerDuration(o.s.store.DurationRange()),
			// Its renewals, every 1.7 s, are traced nowhere: they buried
			// the leases' traces (telemetry.Unsampled).
			kvlease.WithLease(kvlease.WithAttributes(map[string]string{instanceAttr: o.instance}),
				kvlease.WithHolderTracerProvider(telemetry.Unsampled())),
			kvlease.WithOnUnavailable(func(err error) {
				o.s.log.Warn("observer campaign", "err", err, "retrying", true)
			}))
		if err != nil {
			if ctx.Err() == nil {
				o.s.log.Warn("observer campaign", "err", err, "retry_in", wait)
			}
			pause()
			continue
		}
		o.setState("observing")
		o.s.log.Info("observing the lease bucket", "node", o.candidate, "token", lead.Token())
		err = o.observe(ctx, lead)
		o.setState("standby")
		switch {
		case ctx.Err() != nil:
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = lead.Resign(rctx) // hand over at once
			cancel()
			return
		case lead.Context().Err() != nil:
			o.s.log.Warn("lost the observer lease", "err", lead.Err())
		default:
			o.s.log.Warn("observer stopped", "err", err, "retry_in", wait)
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = lead.Resign(rctx)
			cancel()
			pause()
			continue
		}
		wait = campaignFirstWait // it observed until it lost the lease: no failure in a row
	}
}

func (o *observer) setState(st string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.state = st
}

// open is a tenure the observer has seen begin and not end.
type openTenure struct {
	token    kvlease.Token
	renewals int
	// expires is when the server should lapse the tenure's last revision
	// seen (zero if unknown): see endOverdue.
	expires time.Time
	// recorded: the history has the tenure's end already (see
	// endOverdue); its end in the bucket is not recorded again.
	recorded bool
	// unchecked: opened without its begin (replayed at a takeover, or by
	// rescan), so its end may be one the history has already: a tenure a
	// server brought back whose lapse came before EndResurrected's end
	// was recorded twice (found in review). Its end is checked against
	// the history first.
	unchecked bool
	// durationMS and traceID are the tenure's D and grant trace, if known,
	// for its end's record.
	durationMS int64
	traceID    string
}

// seen notes rec, the tenure's latest revision, if known.
func (t *openTenure) seen(rec *kvlease.Record) {
	if rec == nil {
		return
	}
	if rec.TTL > 0 {
		t.expires = rec.ExpiresAt()
	}
	t.durationMS = cmp.Or(rec.Duration.Milliseconds(), t.durationMS)
	if t.traceID == "" { // once a tenure: a renewal keeps its grant's trace
		t.traceID = history.TraceIDOf(*rec)
	}
}

// observe reports the bucket's changes while lead lasts. It reports what
// its predecessor did not: the changes after the revision of the last
// history record (kvlease.ChangesAfter), a tenure's begin only if its
// token is above that revision (a tenure first seen through a renewal began
// before it), and each record appended only once (history.Stream.Append
// drops a change appended before, by a predecessor that was only paused).
func (o *observer) observe(ctx context.Context, lead *election.Leadership) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(lead.Context(), cancel)
	defer stop()
	after, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (uint64, error) {
		return o.startRevision(ctx, uint64(lead.Token()))
	})
	if err != nil {
		return err
	}
	// Flapping counts go on from the history's last window, not from zero
	// at each takeover.
	o.flaps = telemetry.NewFlapDetector(o.s.flaps.Window, o.s.flaps.Threshold)
	o.s.seedFlaps(ctx, o.hist, o.flaps)
	w, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (*kvlease.Watcher, error) {
		return o.s.store.Watch(ctx, "", kvlease.ChangesAfter(after), kvlease.ReportFrees())
	})
	if err != nil {
		return err
	}
	o.markReady()
	// The changes come from w until it has caught up with the service's
	// own watch, then from that watch (see feed).
	events, errc := make(chan kvlease.Event, 64), make(chan error, 1)
	go func() {
		errc <- o.changes(ctx, w, after, events)
		close(events)
	}()
	defer func() {
		cancel()
		for range events { // wait for changes to end
		}
	}()
	open := map[string]*openTenure{}
	// The tenures its watch replayed live are checked against the history
	// (endEndedAgain), off this goroutine, from the first sweep on; those
	// whose check failed (JetStream unavailable, as it often is just after
	// the restart that made this observer) are checked again at the next.
	// By name: a replay after each cut-off brings the same ones again.
	replayed := map[string]kvlease.Record{}
	var (
		checking atomic.Bool
		checkers sync.WaitGroup
		failedMu sync.Mutex
		failed   []kvlease.Record // checks that failed, for the next sweep
	)
	defer func() {
		cancel()
		checkers.Wait()
	}()
	vanished := make(chan []history.Record)
	checkers.Go(func() { o.endVanished(ctx, after, vanished) })
	o.pending = o.pending[:0] // a predecessor reports what a lost leadership left unwritten
	o.ended = nil
	// The records of changes that come close together go together: until
	// the watch has been quiet for historyLinger, or maxPending records
	// wait. Under load (a burst of grants, an observer catching up) that
	// is one synced write for many changes, not one each.
	lingerFor := cmp.Or(o.s.historyLinger, historyLinger)
	linger := time.NewTimer(lingerFor)
	defer linger.Stop()
	// The first sweep comes soon: a server that lost expiries did so as it
	// restarted, which is often why this observer was elected. (Not
	// sooner than a sweep period a test set: one that keeps the sweep out
	// of its way keeps the first one out too.)
	sweep := time.NewTicker(cmp.Or(o.s.overdueSweep, min(time.Second, overdueSweep)))
	defer sweep.Stop()
	swept := false
	var handled uint64 // the revision of the last change handled
	// The NATS server this node's connection is on: one that changes
	// under a running observer (serve --nats-url, restarted or failed
	// over) may have lost data in an unclean stop, as one does that makes
	// a node elect a new observer (see rescan).
	nc := o.s.store.JetStream().Conn()
	server := nc.ConnectedServerId()
	// flush writes what is pending, only while this node still observes:
	// one paused since it queued the records reports nothing more.
	flush := func() error {
		if err := lead.Lease().Check(); err != nil {
			return err
		}
		return o.flush(ctx)
	}
	for {
		var ev kvlease.Event
		ok := true
		var lingered <-chan time.Time // only while records wait
		if len(o.pending) > 0 {
			linger.Reset(lingerFor)
			lingered = linger.C
		}
		select {
		case ev, ok = <-events:
		case ends := <-vanished:
			var queued []history.Record
			for _, r := range ends {
				if t := open[r.Name]; t != nil && uint64(t.token) > r.Token || uint64(o.ended[r.Name].token) > r.Token {
					// Granted again since it was found gone, and reported:
					// the end would follow that tenure's begin, as the
					// lease's last record, and the next takeover would not
					// see it held (found in review). The history's fold
					// ends the tenure at that begin.
					continue
				}
				r.Revision = max(handled, after)
				o.pending = append(o.pending, pendingRecord{rec: r})
				queued = append(queued, r)
			}
			if o.s.onVanished != nil {
				o.s.onVanished(queued, true)
			}
			if len(o.pending) >= maxPending {
				if err := flush(); err != nil {
					return err
				}
			}
			continue
		case <-lingered:
			if err := flush(); err != nil {
				return err
			}
			if o.s.onObserved != nil {
				o.s.onObserved(handled)
			}
			continue
		case <-sweep.C:
			if err := lead.Lease().Check(); err != nil {
				return err
			}
			if id := nc.ConnectedServerId(); id != "" && id != server {
				recs, err := o.rescan(ctx, handled, open)
				if err == nil || server == "" {
					server = id
				}
				if err != nil && ctx.Err() == nil {
					o.s.log.Warn("cannot look for leases the NATS server brought back", "err", err, "retry_in", sweepEvery(o.s))
				}
				for _, rec := range recs {
					replayed[rec.Name] = rec
				}
			}
			o.endOverdue(ctx, open)
			now := time.Now()
			o.forgetEnds(now)
			o.flaps.Sweep(now)
			o.s.flaps.Sweep(now)
			if !checking.Load() {
				failedMu.Lock()
				for _, rec := range failed {
					if _, ok := replayed[rec.Name]; !ok {
						replayed[rec.Name] = rec
					}
				}
				failed = nil
				failedMu.Unlock()
			}
			if len(replayed) > 0 && !checking.Load() {
				refs := slices.SortedFunc(maps.Values(replayed), func(a, b kvlease.Record) int { // as replayed
					return cmp.Compare(a.Revision, b.Revision)
				})
				clear(replayed)
				checking.Store(true)
				checkers.Go(func() {
					defer checking.Store(false)
					left := o.endEndedAgain(ctx, refs)
					failedMu.Lock()
					failed = append(failed, left...)
					failedMu.Unlock()
				})
			}
			if !swept {
				swept = true
				sweep.Reset(sweepEvery(o.s))
			}
			continue
		}
		if !ok {
			break
		}
		if !reserved(ev.Name) {
			if err := lead.Lease().Check(); err != nil {
				return err // a paused observer that resumes reports nothing more
			}
			if err := o.report(ctx, ev, after, open); err != nil {
				return err
			}
			if ev.Replay && !ev.Type.Ends() && ev.Record != nil && ev.Revision <= after {
				// Stored before this observer began (a tenure renewed
				// since is live for sure): after a cut-off, its new
				// watch's replay brings the others again, not these.
				replayed[ev.Name] = *ev.Record
			}
			if o.s.onReported != nil {
				o.s.onReported(ev.Revision)
			}
		}
		handled = ev.Revision
		if len(o.pending) >= maxPending {
			if err := flush(); err != nil {
				return err
			}
		}
		if o.s.onObserved != nil && len(o.pending) == 0 {
			o.s.onObserved(handled)
		}
	}
	if err := <-errc; err != nil && ctx.Err() == nil {
		return err
	}
	// Stopped (the node shutting down) while still the observer: what it
	// has recorded is appended and published now, not left to a successor,
	// which would append it and publish nothing (a change appended before
	// is not news to it): a clean stop lost the change events of the last
	// few milliseconds' changes (found by an outside client).
	if len(o.pending) > 0 && lead.Lease().Check() == nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
		defer cancel()
		if err := o.flush(fctx); err != nil {
			o.s.log.Info("stopping: some changes left for the next observer to record", "records", len(o.pending), "err", err)
		}
	}
	return ctx.Err()
}

// seedFlaps counts into each detector the grants of its last window the
// history holds: a restart or a takeover started every lease's count
// again, and a lease granted anew five times in 11 s around a restart was
// not flagged (found by an outside client). It reads at most
// maxFlapSeed records, for at most flapSeedWait: the counts are advice.
func (s *Service) seedFlaps(ctx context.Context, hist *history.Stream, dets ...*telemetry.FlapDetector) {
	ctx, cancel := context.WithTimeout(ctx, flapSeedWait)
	defer cancel()
	n := 0
	err := hist.Follow(ctx, "", time.Now().Add(-s.flaps.Window), func(r history.Record, caughtUp bool) bool {
		if caughtUp {
			return false
		}
		if r.Kind == history.KindGranted {
			for _, d := range dets {
				d.GrantedTenure(r.Name, r.Token, r.Time)
			}
		}
		n++
		return n < maxFlapSeed
	})
	if err != nil && ctx.Err() == nil {
		s.log.Info("flapping counts start from zero: cannot read the history's last window", "err", err)
	}
}

const (
	maxFlapSeed  = 50_000
	flapSeedWait = 2 * time.Second
)

// overdueSweep is how often the observer looks for tenures the server
// has kept past their TTL (endOverdue).
const overdueSweep = 5 * time.Second

// maxOverdueEnds bounds the ends one sweep writes: a server that lost many
// expiries at once is caught up over several sweeps.
const maxOverdueEnds = 1000

// endOverdue ends the open tenures the server has kept past their TTL by
// the store's grace (nats-server loses an expiry over an unclean restart:
// see kvlease.OverdueGrace), so that watchers and the history see
// them end, as expired. The store confirms each against the server's
// clock; their ends come back through the watch, which closes them here.
func (o *observer) endOverdue(ctx context.Context, open map[string]*openTenure) {
	grace := o.s.store.OverdueGrace()
	overdue := func(t *openTenure, now time.Time) bool {
		return !t.expires.IsZero() && now.After(t.expires.Add(grace))
	}
	now := time.Now()
	var names []string
	for name, t := range open {
		if overdue(t, now) && len(names) < maxOverdueEnds {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	// Once by the server's clock for all (a clock here far ahead of the
	// server's would otherwise make every sweep try every lease).
	sctx, cancel := context.WithTimeout(ctx, attemptTimeout)
	serverNow, err := o.s.store.ServerTime(sctx)
	cancel()
	if err != nil {
		o.s.log.Info("cannot read the NATS server's time for overdue leases", "leases", len(names), "err", err)
		return
	}
	ends := passLog{log: o.s.log, msg: "ended a lease the NATS server kept past its TTL"}
	// Those whose end the history has: released or lapsed long ago, and
	// brought back (it read as lapsed only; found by an outside client).
	endedAgain := passLog{log: o.s.log, msg: "ended a lease the NATS server brought back after it had ended (and kept past its TTL)"}
	fails := passLog{log: o.s.log, msg: "cannot end a lease the server kept past its TTL"}
	defer ends.done()
	defer endedAgain.done()
	defer fails.done()
	for _, name := range names {
		t := open[name]
		if !overdue(t, serverNow) {
			continue
		}
		// A server that lost expiries over an unclean restart may also
		// bring back a tenure that was released or lapsed long ago, whose
		// end the history has, outside the window in which it would take
		// the same end as a duplicate: it is ended in the bucket, not
		// recorded, announced, traced or counted twice.
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		r, ok, err := o.hist.LastFor(actx, name)
		cancel()
		if err == nil && ok && (r.Token > uint64(t.token) || r.Token == uint64(t.token) && r.Ends()) {
			t.recorded = true
		}
		actx, cancel = context.WithTimeout(ctx, attemptTimeout)
		ended, err := o.s.store.EndOverdue(actx, name)
		cancel()
		switch {
		case err != nil:
			fails.add("lease", name, "err", err)
		case ended && t.recorded:
			endedAgain.add("lease", name, "token", t.token, "expired_at", t.expires)
		case ended:
			ends.add("lease", name, "token", t.token, "expired_at", t.expires)
		default:
			// Renewed meanwhile (its renewal is on the way), gone, or not
			// overdue by the server's clock yet: look again next time.
			t.expires = t.expires.Add(sweepEvery(o.s))
		}
	}
}

// rescan reads the bucket as it is now, after the NATS server changed
// under the running observer, and opens each tenure live there that the
// observer did not have open, stored at or before handled (the revision of
// the last change it handled: the later ones are on their way to it). It
// returns them, for endEndedAgain. A server that stopped uncleanly and
// came back brings back tenures the history has seen end (nats-server
// issue 8505), and its watch does not replay what it had passed: they
// stayed live, their leases refused to others, until their own expiry
// (found trying a --nats-url server kill by hand). Opened, those the
// server also keeps past their TTL are ended by endOverdue.
//
// It runs on the observer's goroutine, so that no change is handled
// between the read and the opening: what the read shows at or before
// handled, no change after it has superseded.
func (o *observer) rescan(ctx context.Context, handled uint64, open map[string]*openTenure) ([]kvlease.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, rescanTimeout)
	defer cancel()
	w, err := o.s.store.Watch(ctx, "")
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	live := map[string]kvlease.Record{}
	err = w.CatchUp(ctx, func(ev kvlease.Event) error {
		if ev.Type.Ends() || ev.Record == nil {
			delete(live, ev.Name)
		} else {
			live[ev.Name] = *ev.Record
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var back []kvlease.Record
	for name, rec := range live {
		if reserved(name) || rec.Revision > handled {
			continue
		}
		if t := open[name]; t == nil || t.token != rec.Token {
			t = &openTenure{token: rec.Token, unchecked: true}
			t.seen(&rec)
			open[name] = t
			back = append(back, rec)
		}
	}
	if len(back) > 0 {
		o.s.log.Info("the NATS server changed: checking the leases live there that this observer had not open against the history",
			"leases", len(back))
	}
	return back, nil
}

// rescanTimeout bounds a rescan's read of the bucket.
const rescanTimeout = time.Minute

// sweepEvery is how often the observer sweeps (endOverdue, rescan).
func sweepEvery(s *Service) time.Duration { return cmp.Or(s.overdueSweep, overdueSweep) }

// endEndedAgain ends in the bucket each tenure of replayed (live in the
// replay of the observer's watch) that the history shows ended: one that a
// server that lost data over an unclean stop brought back. A released
// tenure comes back once its tombstone has lapsed, live until its own
// expiry, up to its whole duration: its lease was refused to others as
// held, and an election's Observe showed a leader that had resigned (found
// by an outside client, 3 of 3 times). The history's end stands: the
// bucket's end (Store.EndResurrected, kvlease.ResurrectedReason) is not
// recorded or announced again (see report). The reads are paced
// (resurrectChecks per resurrectPause) so that a bucket of many leases
// does not flood the server as the observer takes over. It returns the
// tenures whose check JetStream did not answer, to be checked again
// (found in review: one check, just after an unclean restart, left a
// tenure whose history read failed live until its own expiry).
func (o *observer) endEndedAgain(ctx context.Context, replayed []kvlease.Record) (failed []kvlease.Record) {
	const cannot = "cannot check a lease the NATS server may have brought back after it had ended"
	ends := passLog{log: o.s.log, msg: "ended a lease the NATS server brought back after it had ended"}
	unavailable, refused := passLog{log: o.s.log, msg: cannot}, passLog{log: o.s.log, msg: cannot}
	defer ends.done()
	defer unavailable.done()
	defer refused.done()
	for i, rec := range replayed {
		if i > 0 && i%resurrectChecks == 0 {
			select {
			case <-time.After(resurrectPause):
			case <-ctx.Done():
				return nil
			}
		}
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		last, ok, err := o.hist.LastFor(actx, rec.Name)
		cancel()
		ended := false
		if err == nil && ok && endedBy(rec, last) {
			actx, cancel = context.WithTimeout(ctx, attemptTimeout)
			ended, err = o.s.store.EndResurrected(actx, rec)
			cancel()
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case errors.Is(err, kvlease.ErrUnavailable):
			unavailable.add("lease", rec.Name, "token", rec.Token, "err", err, "retry_in", sweepEvery(o.s))
			failed = append(failed, rec)
		case err != nil: // refused: it would be every time
			refused.add("lease", rec.Name, "token", rec.Token, "err", err)
		case ended:
			ends.add("lease", rec.Name, "holder", rec.Holder, "token", rec.Token)
		}
		if o.s.onEndChecked != nil {
			o.s.onEndChecked(rec, ended, err)
		}
	}
	return failed
}

// vanishedIdle bounds endVanished's read of the history (see
// history.Stream.Held), and vanishedRecheck is how long it waits before it
// reads again the leases it found gone.
const (
	vanishedIdle    = 10 * time.Second
	vanishedRecheck = time.Second
)

// endVanished records an end ([history.EndUnknown], [history.VanishedReason]) of
// each tenure the history shows held, of a change at or below after (the
// revision this observer's watch starts after), of whose lease the bucket
// keeps no entry at all, so that nothing is left for the watch to bring: when
// no grantor observed for longer than an end's marker is kept (5 min),
// the ends of that time left nothing in the bucket, and the history showed
// those tenures held until its records aged out (a day), `leased history`
// and the timeline with them (found by an outside client: a lone grantor
// cut off from its server for 5.5 min). It runs once per takeover, off
// the observer's goroutine: it reads the history's held tenures (one
// message per lease) and the live leases, then each lease the two
// disagree on, paced as endEndedAgain's reads are, and those it finds
// gone once more a moment later (a stream leader that resumes answers
// from its old state until it hears of the new one: no entry, for a
// lease granted since; found in review). It sends the ends to the
// observer's goroutine, which appends them in order with its own records
// (a record's revision is how far the history has gone: see
// startRevision). Unavailable, it tries again until ctx ends.
func (o *observer) endVanished(ctx context.Context, after uint64, vanished chan<- []history.Record) {
	held, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() ([]history.Record, error) {
		return o.hist.Held(ctx, vanishedIdle)
	})
	if err != nil {
		return
	}
	held = slices.DeleteFunc(held, func(r history.Record) bool { return r.Token == 0 || r.Revision > after })
	if len(held) == 0 {
		return
	}
	live, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() ([]kvlease.Record, error) {
		return o.s.store.List(ctx, "")
	})
	if err != nil {
		return
	}
	tokens := make(map[string]kvlease.Token, len(live))
	for _, l := range live {
		tokens[l.Name] = l.Token
	}
	held = slices.DeleteFunc(held, func(r history.Record) bool { return tokens[r.Name] == kvlease.Token(r.Token) })
	found := time.Now() // gone by then: before any grant of the lease that may follow
	gone := o.gone(ctx, held)
	if len(gone) > 0 {
		select {
		case <-time.After(vanishedRecheck):
		case <-ctx.Done():
			return
		}
		gone = o.gone(ctx, gone)
	}
	if len(gone) == 0 {
		return
	}
	ends := make([]history.Record, len(gone))
	for i, r := range gone {
		ends[i] = history.Record{Kind: history.KindEnded, Name: r.Name, Token: r.Token, Holder: r.Holder,
			Time: found, GrantedAt: r.GrantedAt, DurationMS: r.DurationMS,
			EndedBy: history.EndUnknown, Reason: history.VanishedReason, TraceID: r.TraceID, Observer: o.candidate}
	}
	if o.s.onVanished != nil {
		o.s.onVanished(ends, false)
	}
	for chunk := range slices.Chunk(ends, maxPending) {
		select {
		case vanished <- chunk:
		case <-ctx.Done():
			return
		}
	}
	o.s.log.Warn("found tenures the history showed held that ended while no grantor observed; recording their ends", "tenures", len(ends))
}

// gone returns the tenures of held whose leases the bucket keeps no entry
// of at all, reading each lease, paced as endEndedAgain's reads are.
func (o *observer) gone(ctx context.Context, held []history.Record) []history.Record {
	var out []history.Record
	for i, r := range held {
		if i > 0 && i%resurrectChecks == 0 {
			select {
			case <-time.After(resurrectPause):
			case <-ctx.Done():
				return nil
			}
		}
		e, err := kvlease.RetryUnavailable(ctx, time.Second, nil, func() (lastEntry, error) {
			actx, cancel := context.WithTimeout(ctx, attemptTimeout)
			defer cancel()
			rec, live, err := o.s.store.Last(actx, r.Name)
			return lastEntry{rec, live}, err
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			o.s.log.Warn("cannot check a lease the history shows held", "lease", r.Name, "token", r.Token, "err", err)
		case !e.live && e.rec.Revision == 0:
			out = append(out, r)
		}
		// Else held, or an entry left: a change the watch brings, or a
		// record the server kept past its TTL, which the overdue sweep
		// (or a grant over it) ends with its true cause.
	}
	return out
}

// lastEntry is what Store.Last returns, as one value.
type lastEntry struct {
	rec  kvlease.Record
	live bool
}

// passLog logs what one pass of a sweep did to each lease, as msg with
// the lease's attributes, for the first passLogged leases, and then one
// line with how many there were in all: an unclean restart that brought
// back 3,000 leases logged 3,000 lines (found by an outside client).
type passLog struct {
	log *slog.Logger
	msg string
	n   int
}

// passLogged is how many leases of a pass are logged one by one.
const passLogged = 5

func (p *passLog) add(args ...any) {
	if p.n++; p.n <= passLogged {
		p.log.Warn(p.msg, args...)
	}
}

// done logs the count of the pass, if some leases were not logged.
func (p *passLog) done() {
	if p.n > passLogged {
		p.log.Warn(p.msg, "leases", p.n, "logged_one_by_one", passLogged)
	}
}

// endedBy reports whether last, the history's last record of the lease of
// tenure rec, shows rec ended: its own end (same token and holder, granted
// within grantTimeSlack of rec's grant), or a later tenure's begin or end,
// more than grantTimeSlack after rec's grant. Tokens alone are no proof: a
// bucket made anew issues tokens the history has seen before, to live
// tenures (found in review: a live tenure ended, its holder still at
// work). The times are compared with a slack: an end's grant time may be
// the granting node's clock (the tombstone a Store writes names the
// tenure as it has it), and so may rec's.
func endedBy(rec kvlease.Record, last history.Record) bool {
	switch {
	case last.Token == uint64(rec.Token):
		return last.Ends() && last.Holder == rec.Holder && !last.GrantedAt.IsZero() &&
			last.GrantedAt.Sub(rec.GrantedAt).Abs() <= grantTimeSlack
	case last.Token > uint64(rec.Token):
		// last.Time is the server's clock, rec.GrantedAt may be the
		// granting node's: past the slack, so that a tenure granted just
		// after a recreated bucket's last record, on a node whose clock is
		// behind the server's, is not taken for one before it (review).
		return last.Time.After(rec.GrantedAt.Add(grantTimeSlack))
	}
	return false
}

// grantTimeSlack bounds the difference of two clocks' grant times of one
// tenure (endedBy).
const grantTimeSlack = 10 * time.Second

// resurrectChecks tenures are checked against the history, at most, per
// resurrectPause (endEndedAgain).
const (
	resurrectChecks = 500
	resurrectPause  = 100 * time.Millisecond
)

// switchIdle is how long the observer's own watch, caught up, may deliver
// nothing before the observer moves to the service's watch without having
// seen that watch's last revision: what is left below it made no event
// (an undecodable entry).
const switchIdle = time.Second

// changes passes to out, in order, the bucket's changes after revision
// from, beginning with w, a watch of its own from there
// (kvlease.ChangesAfter(from)). Once w has caught up with the service's
// own watch, it stops w and passes that watch's events instead (through
// the service's feed), skipping those w passed already; when the feed cuts
// it off, it catches up on a new watch of its own from the last revision
// it passed, and so on. It returns when ctx ends (ctx's error) or a watch
// of its own fails.
func (o *observer) changes(ctx context.Context, w *kvlease.Watcher, from uint64, out chan<- kvlease.Event) error {
	last := from // the revision of the last event passed (a carried end can be older: max)
	pass := func(ev kvlease.Event) error {
		select {
		case out <- ev:
			last = max(last, ev.Revision)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for {
		sub, err := o.catchUp(ctx, w, pass, &last)
		w.Stop()
		if err != nil || sub == nil {
			return err
		}
		o.s.feedHook(true)
		o.s.log.Debug("observer caught up; following the service's watch", "revision", last)
		err = o.fromFeed(ctx, sub, last, pass)
		o.s.feed.unsubscribe(sub)
		if err != nil {
			return err
		}
		o.s.feedHook(false)
		if o.s.feed.ended() {
			o.s.log.Warn("the service's watch ended; the observer goes on with a watch of its own", "revision", last)
		} else {
			o.s.log.Warn("observer fell behind the service's watch; catching up on a watch of its own", "revision", last)
		}
		w, err = kvlease.RetryUnavailable(ctx, time.Second, nil, func() (*kvlease.Watcher, error) {
			return o.s.store.Watch(ctx, "", kvlease.ChangesAfter(last), kvlease.ReportFrees())
		})
		if err != nil {
			return err
		}
	}
}

// catchUp passes w's events until w has caught up with the bucket and with
// the service's watch: it has passed the last revision that watch had
// passed on when the subscription began. It returns the subscription to
// go on with, or nil after passing all of w if the service's watch has
// ended.
func (o *observer) catchUp(ctx context.Context, w *kvlease.Watcher, pass func(kvlease.Event) error, last *uint64) (*feedSub, error) {
	if err := w.CatchUp(ctx, pass); err != nil {
		return nil, err
	}
	ended := func() error {
		if err := w.Err(); err != nil {
			return err
		}
		return ctx.Err()
	}
	for {
		sub := o.s.feed.subscribe()
		if sub == nil { // this watch is all there is
			for ev := range w.Events() {
				if err := pass(ev); err != nil {
					return nil, err
				}
			}
			return nil, ended()
		}
		idle := time.NewTimer(switchIdle)
		for target := sub.from - 1; *last < target; {
			select {
			case ev, ok := <-w.Events():
				if !ok {
					o.s.feed.unsubscribe(sub)
					return nil, ended()
				}
				if err := pass(ev); err != nil {
					o.s.feed.unsubscribe(sub)
					return nil, err
				}
				idle.Reset(switchIdle)
			case <-idle.C:
				target = 0
			case <-sub.lost:
				target = 0
				sub = nil
			case <-ctx.Done():
				o.s.feed.unsubscribe(sub)
				return nil, ctx.Err()
			}
		}
		idle.Stop()
		if sub != nil {
			return sub, nil
		}
		// Cut off while still catching up: subscribe again.
	}
}

// fromFeed passes sub's events after revision last, until the feed cuts
// sub off (nil: the caller catches up on a watch of its own) or ctx ends.
func (o *observer) fromFeed(ctx context.Context, sub *feedSub, last uint64, pass func(kvlease.Event) error) error {
	// The events w passed already. An end a grant carries comes just
	// before that grant with the revision of its tombstone, older, or of
	// the record the server kept past its TTL, which w may have passed
	// live: it is skipped though its grant is not, whose event has it
	// (endReplaced).
	skipping := true
	take := func(ev kvlease.Event) error {
		if skipping && ev.Revision <= last {
			return nil
		}
		skipping = false
		return pass(ev)
	}
	for {
		select {
		case ev := <-sub.events:
			if err := take(ev); err != nil {
				return err
			}
		case <-sub.lost:
			for { // what it holds came before the cut: a prefix, in order
				select {
				case ev := <-sub.events:
					if err := take(ev); err != nil {
						return err
					}
				default:
					return nil
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// startRevision is the revision after which changes are this observer's to
// report: that of the last history record; with no history yet, the
// bucket's revision now (what came before is state, not news). So too with
// a history whose last record is above the bucket's revision now, which
// the observer's own campaign has just written: the bucket was made anew
// under its history (its tokens began again), and the new tenures below
// the history's last revision were left out of it as reported (found by
// deleting the bucket under a stopped serve; serve now makes a bucket anew
// above its history, but a bucket another program creates begins at 1).
// The bucket's revision is at least campaigned, the token of this
// observer's own lease: a read answered by a deposed stream leader from
// its frozen state must not look like a bucket made anew (found in review).
//
// The tenures such a history shows live ended with the old bucket: their
// ends are recorded first (history.Stream.EndLive), at the bucket's
// revision, which is then the history's last (so that the next observer
// does not read the whole history again).
func (o *observer) startRevision(ctx context.Context, campaigned uint64) (uint64, error) {
	actx, cancel := context.WithTimeout(ctx, attemptTimeout)
	defer cancel()
	last, ok, err := o.hist.Last(actx)
	if err != nil {
		return 0, err
	}
	rev, err := o.s.store.LastRevision(actx)
	rev = max(rev, campaigned)
	switch {
	case err != nil:
		return 0, err
	case ok && last.Revision > rev:
		o.s.log.Warn("the lease bucket's revisions are below its history's: it was made anew, and its tokens began again "+
			"(fences that saw the old ones refuse them; make a bucket anew with a first token above its history's: serve --first-token, kvlease.WithFirstToken)",
			"bucket", o.s.store.Bucket(), "bucket_revision", rev, "history_revision", last.Revision)
		ended, err := o.hist.EndLive(ctx, last.Revision, rev, time.Now())
		if err != nil {
			return 0, err
		}
		if ended > 0 {
			o.s.log.Warn("the tenures the history showed held ended with the old bucket, and the history now says so",
				"bucket", o.s.store.Bucket(), "tenures", ended)
		}
		return rev, nil
	case ok:
		return last.Revision, nil
	}
	return rev, nil
}

func (o *observer) report(ctx context.Context, ev kvlease.Event, after uint64, open map[string]*openTenure) error {
	switch {
	case ev.Type == kvlease.EventFreed:
		// Its revocation ended the tenure, in the history already unless
		// this observer's watch began after it (a predecessor records
		// both).
		if ev.Revision > after {
			o.recordFreed(ev)
		}
		return nil
	case ev.Replay:
		// A tenure it knows (replayed again after a cut-off) keeps its count.
		t := open[ev.Name]
		if ev.Record != nil && (t == nil || t.token != ev.Token) {
			t = &openTenure{token: ev.Token}
			open[ev.Name] = t
		}
		if t != nil && t.token == ev.Token {
			t.seen(ev.Record)
		}
		return nil
	case ev.Type == kvlease.EventRenewed:
		o.s.metrics.LeaseEvent(ctx, ev.Type.String())
		if t := open[ev.Name]; t != nil && t.token == ev.Token {
			t.renewals++
			t.seen(ev.Record)
		}
		return nil
	case ev.Type == kvlease.EventGranted:
		prev := open[ev.Name]
		if prev != nil && prev.token == ev.Token {
			return nil // a tenure it knows, first seen by a new watch (after a cut-off)
		}
		open[ev.Name] = &openTenure{token: ev.Token}
		open[ev.Name].seen(ev.Record)
		o.endReplaced(ctx, ev, prev, after)
		delete(o.ended, ev.Name)
		if uint64(ev.Token) <= after {
			open[ev.Name].unchecked = true
			return nil // began before: its predecessor reported it
		}
		o.recordBegin(ev)
		return nil
	default: // an end
		t := open[ev.Name]
		delete(open, ev.Name)
		if ev.Token != 0 {
			o.sawEnd(ev.Name, ev.Token)
		} else if t != nil {
			o.sawEnd(ev.Name, t.token)
		}
		if ev.Reason == kvlease.ResurrectedReason {
			return nil // the history has its end (endEndedAgain)
		}
		tok := ev.Token
		if tok == 0 && t != nil {
			tok = t.token // a marker names none
		}
		if ev.Revision <= after && ev.Token != 0 || t != nil && t.unchecked && tok == t.token {
			// Its watch reports an end from before it began only of a
			// tenure it replayed live from a node behind the stream
			// (kvlease.Watch). A predecessor has recorded it, unless its
			// own watch lagged past it (the bucket keeps one entry per
			// lease): the history says which. So too for a tenure opened
			// without its begin (unchecked).
			lctx, cancel := context.WithTimeout(ctx, attemptTimeout)
			r, ok, err := o.hist.LastFor(lctx, ev.Name)
			cancel()
			if err == nil && ok && (r.Token > uint64(tok) || r.Token == uint64(tok) && r.Ends()) {
				return nil
			}
		}
		if t != nil && t.recorded && (ev.Token == 0 || t.token == ev.Token) {
			return nil
		}
		renewals := 0
		switch {
		case t != nil && (ev.Token == 0 || t.token == ev.Token):
			renewals = t.renewals
			ev.Token = t.token
		case t != nil:
			// The end of a later tenure than the open one: the watch lagged
			// past the open one's end and the later one's begin.
			o.recordEnd(kvlease.Event{Name: ev.Name, Token: t.token, Revision: ev.Revision, Time: ev.Time},
				t.renewals, history.EndUnknown)
		}
		if ev.Token == 0 {
			// An expiry marker of a tenure this watcher did not see live:
			// the history knows it if a predecessor recorded its begin
			// (or this observer did, in a record still pending).
			if err := o.flush(ctx); err != nil {
				return err
			}
			lctx, cancel := context.WithTimeout(ctx, attemptTimeout)
			r, ok, err := o.hist.LastFor(lctx, ev.Name)
			cancel()
			if err == nil && ok && r.Kind == history.KindGranted && r.Token < ev.Revision {
				ev.Holder, ev.Token, ev.GrantedAt = r.Holder, kvlease.Token(r.Token), r.GrantedAt
			}
		}
		o.recordEnd(ev, renewals, endCause(ev))
		if last := &o.pending[len(o.pending)-1].rec; t != nil && t.token == ev.Token {
			// The tenure's D and trace, as its begin has them: a window
			// that starts after the grant (history --since) shows them
			// all the same (found by an outside client).
			last.DurationMS, last.TraceID = cmp.Or(last.DurationMS, t.durationMS), cmp.Or(last.TraceID, t.traceID)
		}
		return nil
	}
}

// endReplaced records the end of the tenure before grant ev, which the
// observer's watch did not report: prev, if the observer has it open, or
// one a predecessor saw begin. The grant carries that end, if its Store
// knew it (kvlease.Event.Replaced), and the history records it as such,
// not as an end of cause unknown at the grant: an observer on the
// service's watch skips the events its own watch passed (fromFeed), by
// revision, and the end of a record the server kept past its TTL, which
// comes just before the grant that took the lease over, has that record's
// own revision, which its own watch had passed as the live record. So
// `leased history` showed such a tenure, after serve was SIGKILLed and
// restarted, ended "unknown" at the new grant, 13 s after its TTL, while
// watches showed it expire (found by an outside client).
//
// Without prev, the end is recorded only for a tenure the history shows
// begun and not ended, as a predecessor left it: an observer whose watch
// began after the grant never sees the tenure before (the bucket keeps
// the grant alone), and recorded no end at all (the history's fold ended
// it "unknown" at the grant). That is looked up only for a tenure that
// began by revision after (this observer's start): a later one this
// observer saw begin, and end if it ended, or missed both.
func (o *observer) endReplaced(ctx context.Context, ev kvlease.Event, prev *openTenure, after uint64) {
	end, carried := ev.Replaced()
	carried = carried && end.Token != 0 && end.Token != ev.Token
	switch {
	case prev != nil && (!carried || end.Token != prev.token):
		// The watch lagged past the end of the tenure before (history 1
		// keeps one entry per lease) and the grant did not carry its
		// tombstone (kvlease.Store.Watch), or carried that of a later
		// tenure: record that it ended, cause unknown.
		unknown := kvlease.Event{Name: ev.Name, Token: prev.token, Revision: ev.Revision, Time: ev.Time}
		if !carried || end.Token < prev.token {
			o.recordEnd(unknown, prev.renewals, history.EndUnknown)
			return
		}
		o.recordMissedWhole(unknown, prev.renewals, end)
		return
	case prev != nil && prev.recorded: // the history has its end (endOverdue)
		return
	case prev == nil && (!carried || uint64(end.Token) > after && o.ended[ev.Name].token == end.Token || o.pendingEnd(ev.Name, end.Token)):
		return
	}
	var renewals int
	var durationMS int64
	var traceID string
	if prev != nil {
		renewals, durationMS, traceID = prev.renewals, prev.durationMS, prev.traceID
	}
	if prev == nil || prev.unchecked {
		// As for an end (report): the history may have it already.
		lctx, cancel := context.WithTimeout(ctx, attemptTimeout)
		r, ok, err := o.hist.LastFor(lctx, ev.Name)
		cancel()
		switch {
		case prev == nil && err == nil && ok && r.Kind == history.KindGranted && r.Token < uint64(end.Token):
			// The history has an earlier tenure open, as a predecessor
			// left it: this one began and ended between the two
			// observers (found killing the observer's node under load:
			// the history's fold ended the earlier one "unknown" at this
			// grant, and had no row of the tenure between).
			o.recordMissedWhole(kvlease.Event{Name: ev.Name, Token: kvlease.Token(r.Token), Revision: ev.Revision, Time: ev.Time},
				0, end)
			return
		case prev == nil && err == nil && (!ok || r.Ends() && r.Token < uint64(end.Token)):
			// The history has no record of it, its last of the lease is
			// an earlier tenure's end: this one began and ended while no
			// observer watched, or its watch lagged past both (found by
			// an outside client pausing the observer's node under load).
			o.recordEnd(end, 0, endCause(end))
			return
		case prev == nil && (err != nil || r.Kind != history.KindGranted || r.Token != uint64(end.Token)):
			return // not a tenure the history has open (or it cannot tell)
		case prev == nil:
			durationMS, traceID = r.DurationMS, r.TraceID
		case err == nil && ok && (r.Token > uint64(end.Token) || r.Token == uint64(end.Token) && r.Ends()):
			return
		}
	}
	o.recordEnd(end, renewals, endCause(end))
	last := &o.pending[len(o.pending)-1].rec
	last.DurationMS, last.TraceID = cmp.Or(last.DurationMS, durationMS), cmp.Or(last.TraceID, traceID)
}

// recordMissedWhole records the end of the tenure unknown names, which
// its watch saw begin (or a predecessor's), cause unknown, and the end of
// a later tenure that began and ended unseen, as the tombstone a grant
// carried has it (end): the earlier one ended when the later one began,
// at the latest. Only the earlier one's end was recorded, at the grant:
// the history gave the lease to its holder while another held it, and had
// no row of the other (found killing the stream leader, which observed,
// under load: the new observer's watch caught up 6 s after its takeover).
func (o *observer) recordMissedWhole(unknown kvlease.Event, renewals int, end kvlease.Event) {
	if !end.GrantedAt.IsZero() {
		unknown.Time = end.GrantedAt
	}
	o.recordEnd(unknown, renewals, history.EndUnknown)
	o.recordEnd(end, 0, endCause(end))
}

// pendingEnd reports whether a record waiting to be appended is the end
// of tenure tok of lease name.
func (o *observer) pendingEnd(name string, tok kvlease.Token) bool {
	return slices.ContainsFunc(o.pending, func(p pendingRecord) bool {
		return p.rec.Kind == history.KindEnded && p.rec.Name == name && p.rec.Token == uint64(tok)
	})
}

// endCause is the history's cause of the end ev reports.
func endCause(ev kvlease.Event) string {
	switch {
	case ev.Reason == kvlease.UnseenEndReason:
		return history.EndUnknown // its watch found the tenure gone, its end lapsed unseen
	case ev.Type == kvlease.EventReleased:
		return history.EndReleased
	case ev.Type == kvlease.EventExpired:
		return history.EndExpired
	case strings.HasPrefix(ev.Reason, history.GossipReasonPrefix):
		return history.EndRemoved
	}
	return history.EndRevoked
}

// recordBegin queues the record of a tenure's begin for the next flush.
func (o *observer) recordBegin(ev kvlease.Event) {
	n, flapping := o.flaps.Granted(ev.Name, ev.Time)
	r := history.Record{Kind: history.KindGranted, Name: ev.Name, Token: uint64(ev.Token), Holder: ev.Holder,
		GrantedAt: ev.GrantedAt}
	if ev.Record != nil {
		r = history.Granted(*ev.Record)
	}
	r.Revision, r.Time, r.Flapping, r.Observer = ev.Revision, ev.Time, flapping, o.candidate
	o.pending = append(o.pending, pendingRecord{rec: r, ev: ev, publish: true, n: n, flapping: flapping})
}

// recordEnd queues the record of a tenure's end for the next flush; one
// of cause history.EndUnknown (an end the watch missed) is not published.
func (o *observer) recordEnd(ev kvlease.Event, renewals int, cause string) {
	r := history.Record{Kind: history.KindEnded, Name: ev.Name, Token: uint64(ev.Token), Holder: ev.Holder,
		Revision: ev.Revision, Time: ev.Time, GrantedAt: ev.GrantedAt, EndedBy: cause, Reason: ev.Reason,
		HoldMS: ev.Hold.Milliseconds(), Renewals: renewals, Observer: o.candidate}
	if rec := ev.Record; rec != nil && rec.Token == ev.Token {
		r.DurationMS, r.TraceID = rec.Duration.Milliseconds(), history.TraceIDOf(*rec)
	}
	o.pending = append(o.pending, pendingRecord{rec: r, ev: ev, publish: cause != history.EndUnknown})
}

// recordFreed queues the record of ev, the free of a hold a revocation
// left (kvlease.EventFreed), for the next flush. It is not published: it
// ends no tenure.
func (o *observer) recordFreed(ev kvlease.Event) {
	r := history.Record{Kind: history.KindFreed, Name: ev.Name, Token: uint64(ev.Token), Holder: ev.Holder,
		Revision: ev.Revision, Time: ev.Time, GrantedAt: ev.GrantedAt, Observer: o.candidate}
	o.pending = append(o.pending, pendingRecord{rec: r, ev: ev})
}

// flush appends the pending records, retrying while the stream is
// unavailable (a cluster electing): a change is never skipped, only
// delayed. Each record appended fresh (not by a predecessor before) is
// then published, in order: a change is announced only once it is in the
// history.
func (o *observer) flush(ctx context.Context) error {
	wait := 50 * time.Millisecond
	for len(o.pending) > 0 {
		recs := make([]history.Record, len(o.pending))
		for i, p := range o.pending {
			recs[i] = p.rec
		}
		// Not cut short by a stop: an append the stream commits whose
		// answer never comes would leave its changes unpublished for good.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), attemptTimeout)
		fresh, err := o.hist.AppendAll(actx, recs)
		cancel()
		for i, f := range fresh {
			if p := o.pending[i]; f && p.publish {
				// An end is counted and traced by the history's cause: a
				// registration gossip removed is "removed" there, not
				// "revoked" (found by an outside client).
				kind := cmp.Or(p.rec.EndedBy, p.ev.Type.String())
				o.s.metrics.LeaseEvent(ctx, kind)
				o.s.publishChange(p.ev, kind, p.n, p.flapping)
			}
		}
		o.pending = o.pending[:copy(o.pending, o.pending[len(fresh):])]
		switch {
		case err == nil:
		case !errors.Is(err, kvlease.ErrUnavailable) || ctx.Err() != nil:
			if !errors.Is(err, context.Canceled) {
				o.s.log.Warn("history append failed", "lease", o.pending[0].rec.Name, "err", err)
			}
			return err
		default:
			o.s.log.Info("waiting to append history", "lease", o.pending[0].rec.Name, "err", err)
			select {
			case <-time.After(wait):
				wait = min(2*wait, time.Second)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}
