package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/membership"
)

// Causes of a registration's removal.
const (
	CauseDeregistered = "deregistered" // the instance released it
	CauseTTL          = "ttl"          // it lapsed: no renewal in time
	CauseGossip       = "gossip"       // gossip declared its node dead, or the node left
	CauseRevoked      = "revoked"      // an operator revoked it
	// CauseUnknown: the registry's watch, cut off from the server, found
	// it gone when it was back, its end no longer in the bucket to say how
	// it ended ([kvlease.UnseenEndReason]), or found a later registration
	// of the instance in its place (reported added just after).
	CauseUnknown = "unknown"
)

// The revocation reasons the registry writes: one of them and the node's
// name. Both begin history.GossipReasonPrefix.
const (
	reasonDead = history.GossipReasonPrefix + "node declared dead: "
	reasonLeft = history.GossipReasonPrefix + "node left: "
)

// Change types.
const (
	ChangeAdded   = "added"
	ChangeRemoved = "removed"
)

// Change is a registration added or removed (renewals are not changes).
type Change struct {
	Type     string       `json:"type"` // ChangeAdded or ChangeRemoved
	Instance api.Instance `json:"instance"`
	Cause    string       `json:"cause,omitempty"` // for "removed": deregistered, ttl, gossip, revoked, unknown
	Time     time.Time
}

// Gossip is what the registry needs from membership; *membership.Node
// implements it.
type Gossip interface {
	Name() string // the local node's
	Member(name string) (membership.Member, bool)
	Members() []membership.Member
	Events() <-chan membership.Event
}

var _ Gossip = (*membership.Node)(nil)

// Registry keeps the registrations of a lease bucket in memory, current by
// watching the bucket (no polling), answers discovery with gossip suspicion
// levels, and removes the registrations of nodes gossip declares dead or that leave it. As a
// [grantor.Extension] it serves svc.v1.register, .deregister and .discover.
type Registry struct {
	store     *kvlease.Store
	gossip    Gossip // nil: no gossip
	threshold float64
	log       *slog.Logger

	mu        sync.Mutex
	instances map[string]map[string]kvlease.Record // service → instance → record
	watchers  map[chan Change]string               // subscriber → service ("" for all)

	started bool // guarded by mu
	// removed holds the tenures gossip's verdict ended, by lease name,
	// until the bucket's watch delivers their end: the sweep does not
	// revoke such a name again (it would end a new tenure of that name).
	removed map[string]kvlease.Token // guarded by mu
	watcher *kvlease.Watcher
	done    chan struct{} // closed when following stops
	// stopping is cancelled by Stop: it ends the reaper and the
	// revocations it has under way.
	stopping context.Context
	stop     context.CancelFunc
	reaped   chan struct{} // closed when the reaper has returned; nil without gossip
	// now is the stall detector's clock (time.Now; tests move their own).
	now func() time.Time
	// looked is when the stall detector last read now, stalled when it
	// saw the last stall end (zero: none yet), and stallHeld the nodes
	// whose verdict it held back since then, logged once each.
	looked, stalled time.Time       // guarded by mu
	stallHeld       map[string]bool // guarded by mu
	// heldAt is the time of each dead verdict heldByStall held back, by
	// node: the sweep's bound from below when it removes the node later
	// (a node that sends this one no heartbeats has only its join as its
	// last heard; registrations granted after that were never removed).
	heldAt  map[string]time.Time // guarded by mu
	watched chan struct{}        // closed when watchStalls has returned; nil without gossip
	// heldLogged is when a removal held back by cutOff was last logged;
	// only the reaper's goroutine uses it.
	heldLogged time.Time
}

var _ grantor.Extension = (*Registry)(nil)

// ErrOption is wrapped by the errors of [New] and of the options that
// refuse a value.
var ErrOption = errors.New("registry: invalid option")

// ErrStarted: Start was called again. A registry starts once; make a new
// one with [New] to start again.
var ErrStarted = errors.New("registry: a registry starts once (make a new one)")

// Option configures [New]. An option returns an error for a value it
// cannot use.
type Option func(*Registry) error

// WithGossip gives the registry a gossip view: discovery reports each
// instance's suspicion level (suspect at or above threshold), and the
// registrations of nodes gossip declares dead, or that leave it, are
// removed at once. Deaths are not acted on while, of the other members
// that did not leave, at least 2 and more than half look dead or suspect,
// having fallen silent within 2 s of each other: this grantor is then
// likely the one cut off from gossip; the registrations are left to their
// TTL, and removed once the view is healthy again if their node is still
// dead (a warning says so, at most every 10 s). Nor are they acted on
// within gossip's suspicion timeout (membership.Node.SuspicionTimeout:
// 2.75 s with the fast profile) of a stall of this grantor (no goroutine
// of it ran for over a second: its host or VM paused, a long GC or I/O
// stall): suspicions under way ran out during the stall, unanswered; the
// sweep removes the registrations after that if their node is still
// dead, and a warning says so. Default: no gossip. A nil
// g or a threshold that is not positive and finite is an error. `leased register` instances send their
// heartbeats only to members whose gossip Meta["role"] is "grantor"
// (membership.Config.HeartbeatRole): give the grantor's node that role,
// as `leased serve` does, or their suspicion stays 0 in its view (gossip's
// dead and left verdicts still come). The registry reads g's Events;
// what another reader takes is found within a second from g's member list
// instead.
func WithGossip(g Gossip, threshold float64) Option {
	return func(r *Registry) error {
		if g == nil {
			return fmt.Errorf("%w: nil gossip", ErrOption)
		}
		if !(threshold > 0) || math.IsInf(threshold, 1) { // also refuses NaN
			return fmt.Errorf("%w: suspicion threshold %v must be positive and finite", ErrOption, threshold)
		}
		r.gossip, r.threshold = g, threshold
		return nil
	}
}

// WithLogger sets the logger. Default: discard. A nil logger is an error.
func WithLogger(l *slog.Logger) Option {
	return func(r *Registry) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrOption)
		}
		r.log = l
		return nil
	}
}

// New returns a registry of the registrations in store. It does nothing
// until [Registry.Start]; handed to [grantor.WithExtension], it starts and
// stops with the service.
func New(store *kvlease.Store, opts ...Option) (*Registry, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrOption)
	}
	r := &Registry{
		store: store, log: slog.New(slog.DiscardHandler), now: time.Now,
		instances: map[string]map[string]kvlease.Record{},
		watchers:  map[chan Change]string{},
		removed:   map[string]kvlease.Token{},
		heldAt:    map[string]time.Time{},
		done:      make(chan struct{}),
	}
	r.stopping, r.stop = context.WithCancel(context.Background())
	for _, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: nil option", ErrOption)
		}
		if err := opt(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Start starts following the registrations in the bucket and, with
// [WithGossip], their nodes' health. It returns once the current
// registrations are loaded; ctx bounds the waiting, not the following,
// which lasts until [Registry.Stop]. A registry starts once.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	started := r.started
	r.started = true
	r.mu.Unlock()
	if started {
		return ErrStarted
	}
	// As the service's own watch: it lives until stopped, and ctx bounds
	// the retries while JetStream is unavailable (a node that has just
	// rejoined its cluster, its stream catching up).
	w, err := kvlease.RetryUnavailable(ctx, 2*time.Second, func(err error) {
		r.log.Info("waiting for JetStream to start a watch", "prefix", api.RegistrationPrefix, "err", err)
	}, func() (*kvlease.Watcher, error) {
		return r.store.Watch(context.WithoutCancel(ctx), api.RegistrationPrefix)
	})
	if err != nil {
		return err
	}
	r.watcher = w
	go r.follow()
	if r.gossip != nil {
		r.reaped, r.watched = make(chan struct{}), make(chan struct{})
		r.lookAtClock()
		go r.watchStalls()
		go r.reap()
	}
	select {
	case <-w.Synced():
	case <-ctx.Done():
		r.Stop()
		return ctx.Err()
	}
	return nil
}

// Stop stops following the bucket and gossip, and closes the channels of
// [Registry.Watch]. Removals by gossip under way are abandoned: it returns
// once nothing of the registry runs. It does nothing if the registry was
// not started.
func (r *Registry) Stop() {
	if r.watcher == nil {
		return
	}
	r.stop()
	r.watcher.Stop()
	<-r.done
	if r.reaped != nil {
		// It was left running, revoking for up to 5 s a registration,
		// after the registry had stopped (found in review).
		<-r.reaped
		<-r.watched
	}
}

func (r *Registry) follow() {
	defer close(r.done)
	for {
		var ev kvlease.Event
		select {
		case <-r.watcher.Interrupts():
			// The one sign an operator had none of: the view stood still,
			// no error anywhere (found by an outside client).
			r.log.Warn("the registry's watch of the bucket is cut off: discovery lists registrations as last seen, and leaves them out at their expiry, until it is back",
				"prefix", api.RegistrationPrefix)
			continue
		case e, ok := <-r.watcher.Events():
			if !ok {
				return
			}
			ev = e
		}
		rec := ev.Record
		if rec == nil {
			rec = &kvlease.Record{Name: ev.Name, Holder: ev.Holder, Token: ev.Token}
		}
		reg, ok := api.RegistrationOf(*rec)
		if !ok || !ev.Type.Ends() && reg.Validate() != nil {
			// A plain grant under svc. (no address): discovered as an
			// instance with none (found by an outside client).
			continue
		}
		r.mu.Lock()
		if tok, ok := r.removed[ev.Name]; ok && (ev.Type.Ends() || rec.Token != tok) {
			delete(r.removed, ev.Name)
		}
		byInst := r.instances[reg.Service]
		ch := Change{Time: ev.Time}
		switch {
		case ev.Type.Ends():
			cur, ok := byInst[reg.Instance]
			if !ok {
				// Never added: the end of a plain grant under svc. (no
				// address), which watchers were told of as a removed
				// instance, with no address, that they had never been
				// told was added (found by an outside client).
				r.mu.Unlock()
				continue
			}
			ch.Instance = r.instance(cur)
			delete(byInst, reg.Instance)
			if len(byInst) == 0 {
				delete(r.instances, reg.Service)
			}
			ch.Type, ch.Cause = ChangeRemoved, causeOf(ev)
		default:
			if byInst == nil {
				byInst = map[string]kvlease.Record{}
				r.instances[reg.Service] = byInst
			}
			cur, existed := byInst[reg.Instance]
			if existed && cur.Token != rec.Token {
				// Another tenure than the one watchers were told of, its
				// end unseen: a cut outlasted the new tenure's first
				// renewal, which replaced the grant that carried the end
				// (kvlease.Store.Watch). Watchers were told it was added
				// again and never that theirs was removed (found by an
				// outside client).
				r.notifyLocked(Change{Type: ChangeRemoved, Instance: r.instance(cur), Cause: CauseUnknown, Time: ev.Time})
			}
			byInst[reg.Instance] = *rec
			if existed && cur.Token == rec.Token && ev.Type == kvlease.EventRenewed {
				r.mu.Unlock()
				continue // a renewal changes nothing a watcher acts on
			}
			ch.Type, ch.Instance = ChangeAdded, r.instance(*rec)
		}
		r.notifyLocked(ch)
		r.mu.Unlock()
	}
}

func causeOf(ev kvlease.Event) string {
	switch {
	case ev.Reason == kvlease.UnseenEndReason:
		return CauseUnknown // reported as an expiry: it was "ttl", for a deregistration too
	case ev.Type == kvlease.EventReleased:
		return CauseDeregistered
	case ev.Type == kvlease.EventExpired:
		return CauseTTL
	case strings.HasPrefix(ev.Reason, history.GossipReasonPrefix):
		return CauseGossip
	default:
		return CauseRevoked
	}
}

// sweepInterval is how often the registry looks for registrations of
// nodes gossip lists as gone whose verdict it missed (see sweep).
const sweepInterval = time.Second

// reap removes the registrations of nodes gossip declares dead or that leave.
func (r *Registry) reap() {
	defer close(r.reaped)
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			r.sweep()
		case ev, ok := <-r.gossip.Events():
			if !ok {
				return
			}
			switch ev.Type {
			case membership.EventDead:
				r.removeNode(ev.Member.Name, reasonDead, ev.Time)
			case membership.EventLeave:
				// A node leaves as its process stops, after deregistering:
				// what is left is a deregistration that failed (the grantor
				// unreachable as it stopped), which would otherwise be
				// listed, suspect, for the rest of its TTL.
				r.removeNode(ev.Member.Name, reasonLeft, ev.Time)
			}
		case <-r.done:
			return
		case <-r.stopping.Done():
			return
		}
	}
}

// sweep removes the registrations of nodes that gossip lists as dead or
// departed, as their verdict's event would have: the event can be missed.
// It went to another reader of the node's Events (a program that logs
// membership too); it came before the registration reached this registry
// (one queued while Start waited, then handled before the bucket's
// registrations were loaded); or its revocation failed (the bucket
// unavailable longer than the attempt). Each left the registration listed
// until its TTL. A node's last heartbeat bounds its verdict's time from
// below: what was granted after it stays, as after an event.
func (r *Registry) sweep() {
	type verdict struct {
		reason string
		at     time.Time
	}
	gone := map[string]verdict{}
	checked := map[string]bool{}
	r.mu.Lock()
	for _, byInst := range r.instances {
		for _, rec := range byInst {
			reg, _ := api.RegistrationOf(rec)
			if checked[reg.Node] || reg.Node == "" || r.removed[rec.Name] == rec.Token {
				continue
			}
			checked[reg.Node] = true
			m, ok := r.gossip.Member(reg.Node)
			if !ok || !m.State.Gone() {
				delete(r.heldAt, reg.Node) // it refuted its death
				continue
			}
			v := verdict{reasonDead, m.LastHeard}
			if m.State == membership.StateLeft {
				v.reason = reasonLeft
			}
			if at := r.heldAt[reg.Node]; at.After(v.at) {
				v.at = at
			}
			gone[reg.Node] = v
		}
	}
	for node := range r.heldAt {
		if !checked[node] {
			delete(r.heldAt, node) // no registration left to remove
		}
	}
	r.mu.Unlock()
	for node, v := range gone {
		r.removeNode(node, v.reason, v.at)
	}
}

// removeNode revokes the registrations on node, which gossip says is gone
// since at (reason says how). A registration granted after that is a new
// process's, on a node of the same name (a restart with a fixed --node):
// it stays. A death is not acted on while gossip says most members are in
// trouble at once (see cutOff): the sweep tries again each second. That
// is logged only when node has registrations to hold back: the death of
// one with none (another grantor) warned of a cut-off that held nothing
// back (found by a review).
func (r *Registry) removeNode(node, reason string, at time.Time) {
	var bad, of int
	cut := false
	if reason == reasonDead && r.gossip != nil {
		if r.heldByStall(node, at) {
			return
		}
		bad, of, cut = cutOff(r.gossip.Members(), r.gossip.Name(), node, at, time.Now())
	}
	r.mu.Lock()
	tenures := map[string]kvlease.Token{}
	for _, byInst := range r.instances {
		for _, rec := range byInst {
			if reg, _ := api.RegistrationOf(rec); reg.Node == node && !rec.GrantedAt.After(at) && r.removed[rec.Name] != rec.Token {
				tenures[rec.Name] = rec.Token
				if !cut {
					r.removed[rec.Name] = rec.Token // before the revocation, whose end the watch may deliver first
				}
			}
		}
	}
	r.mu.Unlock()
	if cut {
		if now := time.Now(); len(tenures) > 0 && now.Sub(r.heldLogged) >= heldLogEvery {
			r.heldLogged = now
			r.log.Warn("gossip says most nodes are gone at once: this grantor is likely cut off; registrations are left to their TTL",
				"node", node, "registrations", len(tenures), "dead_or_suspect", bad, "members", of)
		}
		return
	}
	for name, tok := range tenures {
		ctx, cancel := context.WithTimeout(r.stopping, 5*time.Second)
		// At once: the instance on a node gossip wrongly took for gone
		// registers again, and a registration guards nothing a second
		// holder could harm. Only the tenure seen on node, not whatever
		// holds the name: the view can be behind the bucket, the name
		// held by now by a registration made from another node (an
		// instance that moved), which was revoked (found in review).
		_, err := r.store.Revoke(ctx, name, reason+node, kvlease.FreeNow(), kvlease.OnlyTenure(tok))
		cancel()
		switch {
		case err == nil:
			r.log.Info("removed registration of a node gossip says is gone", "lease", name, "node", node, "reason", reason+node)
		case errors.Is(err, kvlease.ErrNotFound): // gone already (another grantor node was first), or another tenure holds the name
		default:
			r.mu.Lock()
			if r.removed[name] == tok {
				delete(r.removed, name) // the sweep tries again
			}
			r.mu.Unlock()
			if r.stopping.Err() != nil {
				return // stopped: nothing is tried again
			}
			r.log.Warn("could not remove registration of a node gossip says is gone", "lease", name, "node", node, "err", err)
		}
	}
}

// The stall detector: a grantor whose whole host stalls (a VM paused, a
// long GC or I/O stall, every process SIGSTOPped together) comes back to
// gossip verdicts that rest on evidence no one could answer: each
// memberlist suspicion under way when the host stopped has run out while
// its member could not refute it (the timers count the stall too), so the
// member is declared dead at resume. cutOff held such a removal only
// while the others' silence from the stall lasted: their first heartbeats
// ended it, and a verdict handled a moment later removed a live instance
// (4 of 13 runs of serve and eight fast-profile registers, one stopped
// 0.7–1.5 s and then all of them for 5 s; found by an outside client).
// memberlist's awareness only stretches probe intervals (the fast profile
// turns it off); Consul does not deregister on serf's verdict, it marks
// the node's serfHealth check critical. Here a dead verdict handled
// within gossip's suspicion timeout of a stall this registry saw is held
// back, and the sweep removes the node after that if gossip still says
// it is dead: a member that was alive has had a full suspicion timeout
// of fresh evidence to refute its death; one that really died is removed
// that much later, and its TTL bounds it in any case.
const (
	stallTick = 100 * time.Millisecond // how often watchStalls reads the clock
	// stallGap is the longest gap between two readings that is no stall:
	// a host that lets a goroutine wait that long has stopped answering
	// gossip's probes (fast profile: 100 ms probe timeout) too.
	stallGap = time.Second
	// postStallDefault is how long verdicts wait after a stall with a
	// Gossip that does not say its suspicion timeout.
	postStallDefault = 5 * time.Second
)

// watchStalls reads the clock every stallTick until the registry stops,
// and notes a stall when a reading comes more than stallGap after the
// last.
func (r *Registry) watchStalls() {
	defer close(r.watched)
	tick := time.NewTicker(stallTick)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			r.lookAtClock()
		case <-r.stopping.Done():
			return
		}
	}
}

// lookAtClock reads the clock, notes a stall if the last reading is more
// than stallGap ago, and returns the reading and when the last stall
// ended (zero: none seen). removeNode reads it too: at resume gossip's
// verdict can come before watchStalls has run.
func (r *Registry) lookAtClock() (now, stalled time.Time) {
	now = r.now()
	r.mu.Lock()
	gap := now.Sub(r.looked)
	stall := !r.looked.IsZero() && gap > stallGap
	if stall {
		r.stalled, r.stallHeld = now, map[string]bool{}
	}
	r.looked, stalled = now, r.stalled
	r.mu.Unlock()
	if stall {
		r.log.Warn("this grantor was stalled: gossip's verdicts wait for its suspicion timeout of fresh evidence before they remove registrations",
			"stalled_for", gap.Round(time.Millisecond), "wait", r.postStall())
	}
	return now, stalled
}

// postStall is how long after a stall gossip's verdicts are held back:
// its suspicion timeout, if it says it (membership.Node.SuspicionTimeout).
func (r *Registry) postStall() time.Duration {
	if g, ok := r.gossip.(interface{ SuspicionTimeout() time.Duration }); ok {
		if d := g.SuspicionTimeout(); d > 0 {
			return d
		}
	}
	return postStallDefault
}

// heldByStall reports whether a dead verdict on node at is to be held
// back (see stallGap), noting at for the sweep, and logs it once per node
// and stall when node has registrations.
func (r *Registry) heldByStall(node string, at time.Time) bool {
	now, stalled := r.lookAtClock()
	wait := r.postStall()
	if stalled.IsZero() || now.Sub(stalled) >= wait {
		return false
	}
	r.mu.Lock()
	if at.After(r.heldAt[node]) {
		r.heldAt[node] = at
	}
	n := 0
	for _, byInst := range r.instances {
		for _, rec := range byInst {
			if reg, _ := api.RegistrationOf(rec); reg.Node == node {
				n++
			}
		}
	}
	logIt := n > 0 && !r.stallHeld[node]
	if logIt {
		r.stallHeld[node] = true
	}
	r.mu.Unlock()
	if logIt {
		r.log.Warn("gossip declared a node dead within its suspicion timeout of a stall of this grantor: its registrations wait for fresh evidence",
			"node", node, "registrations", n, "until", stalled.Add(wait))
	}
	return true
}

// heldLogEvery bounds how often removeNode logs the removals it holds back.
const heldLogEvery = 10 * time.Second

// atOnce is how close together members must have fallen silent to count
// as in trouble at once: a node cut off hears the last heartbeats of all
// the others within one heartbeat interval (0.5 s with the LAN profile)
// of each other, plus the odd lost one.
const atOnce = 2 * time.Second

// cutOff reports whether members (as [Gossip.Members] lists them) say that
// this node, self, is the one cut off as it judges node dead: of the other
// members, at least 2 and more than half (bad of of) are dead or suspect
// at once. A grantor whose gossip port is firewalled, or whose network to
// the instances is broken, while it still reaches NATS, sees every other
// member die one after another; it revoked every registration in the
// bucket. Like Kubernetes' node lifecycle controller in full disruption,
// it should stop evicting: the TTL still ends the registrations of nodes
// that really died, and the sweep removes them once the view is healthy
// again and their node still dead. The cost of a wrong hold is a removal
// left to the TTL, as when most members really die at once.
//
// Every role counts, grantors too: grantors heartbeat each other, so a
// cut-off grantor sees its peers go with the instances. Suspects count:
// the others' suspicion (though discounted by this node's own poor health)
// comes before memberlist's verdicts, which are spread over seconds. Not
// counted: members that left (a leave is their own word, which no
// partition forges), and dead or suspect members that fell silent (their
// LastHeard) more than atOnce apart from node (its LastHeard, or at if it
// is not listed): dead members stay listed for the gossip's DeadRetention
// (5 min with the LAN profile), and deaths one after another, each
// removed in its turn, are no evidence against this node. (A plain
// memberlist member sends no heartbeats: its LastHeard is its join, so it
// seldom counts as troubled.) With one other member there is no majority
// to judge: it is removed, as before.
//
// Silent members count too: heartbeating ones (suspicion above 0) not
// heard from, by now, for half as long as node has been silent. Members
// that fell silent with node at once are not yet dead, nor suspect, when
// node's verdict comes to a slow grantor: their suspicion is divided by
// its own poor gossip health (memberlist's awareness), and under load
// their heartbeats' intervals vary, which slows phi (found under load, 1
// run in 4 of TestRegistryLeavesRegistrationsToTheirTTLWhenMostNodesGoAtOnce:
// the other two silent with node for 0.95 s, heartbeats due every 0.1 s,
// at suspicion 1.3 and 1.4 against a threshold of 8, health 4). A member
// that is only late is heard again, and the sweep removes node then.
func cutOff(members []membership.Member, self, node string, at, now time.Time) (bad, of int, cut bool) {
	for _, m := range members {
		if m.Name == node {
			at = m.LastHeard
		}
	}
	for _, m := range members {
		silent := m.State == membership.StateAlive && m.Suspicion > 0 && 2*now.Sub(m.LastHeard) >= now.Sub(at)
		troubled := m.State == membership.StateDead || m.State == membership.StateSuspect || silent
		if m.Name == self || m.State == membership.StateLeft || troubled && m.LastHeard.Sub(at).Abs() > atOnce {
			continue
		}
		of++
		if troubled {
			bad++
		}
	}
	return bad, of, of >= 2 && 2*bad > of
}

// instance describes rec with its node's current suspicion.
func (r *Registry) instance(rec kvlease.Record) api.Instance {
	reg, _ := api.RegistrationOf(rec)
	in := api.Instance{Registration: reg, Holder: rec.Holder, Token: uint64(rec.Token), ExpiresAt: rec.ExpiresAt()}
	if r.gossip != nil && reg.Node != "" {
		if m, ok := r.gossip.Member(reg.Node); ok {
			in.Gossip, in.Suspicion = true, m.Suspicion
			in.Suspect = m.Suspicion >= r.threshold
		}
	}
	return in
}

// Discover returns the instances of service, sorted by instance name, with
// their suspicion levels. maxSuspicion > 0 leaves out instances whose node is
// at or above it (instances without gossip are kept: nothing is known
// against them). It leaves out registrations past their expiry by this
// node's clock and the server's ([kvlease.Store.Expired]; only then does it
// ask the server for its time, within ctx): the server has lapsed them, or
// kept them past their TTL after an unclean restart (nats-server issue
// 8505), and a watch that is behind (this node was paused, or cut off)
// still holds them. While the watch is cut off from the stream
// ([kvlease.Watcher.Interrupted]: its connection lost, or its consumer)
// this node's clock alone decides, the server unasked; and what was
// stored meanwhile (a deregistration, a revocation, a new registration)
// is seen once the watch is back: until then a registration that ended
// is listed until its expiry, one made since is not listed, and a live
// one whose renewals the watch has not seen drops out at the expiry the
// watch last saw (a cut longer than a TTL leaves the list empty: this
// node cannot tell a live instance from a dead one, and a lease that
// cannot be seen renewed counts as lapsed). It comes back once the watch
// is.
func (r *Registry) Discover(ctx context.Context, service string, maxSuspicion float64) []api.Instance {
	r.mu.Lock()
	byInst := r.instances[service]
	recs := make([]kvlease.Record, 0, len(byInst))
	for _, inst := range slices.Sorted(maps.Keys(byInst)) {
		recs = append(recs, byInst[inst])
	}
	r.mu.Unlock()
	var expired []kvlease.Record
	if r.watcher != nil && r.watcher.Interrupted() {
		// Cut off: the view hears of no renewal and no end, and the
		// server cannot confirm an expiry (its time is asked on the
		// connection that is cut): a lapsed registration was listed for
		// as long as the cut lasted, each call waiting 5 s for the
		// server's answer (found by an outside client). This node's
		// clock alone decides then.
		now := time.Now()
		for _, rec := range recs {
			if rec.TTL > 0 && now.After(rec.ExpiresAt()) {
				expired = append(expired, rec)
			}
		}
	} else {
		expired = r.store.Expired(ctx, slices.Values(recs), 0)
	}
	out := make([]api.Instance, 0, len(recs))
	for _, rec := range recs {
		if slices.ContainsFunc(expired, func(e kvlease.Record) bool { return e.Revision == rec.Revision }) {
			continue
		}
		in := r.instance(rec)
		if maxSuspicion > 0 && in.Gossip && in.Suspicion >= maxSuspicion {
			continue
		}
		out = append(out, in)
	}
	return out
}

// Watch delivers changes to the registrations of service ("" for all) until
// ctx ends. A subscriber that falls 64 changes behind loses the oldest.
func (r *Registry) Watch(ctx context.Context, service string) <-chan Change {
	ch := make(chan Change, 64)
	r.mu.Lock()
	r.watchers[ch] = service
	r.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-r.done:
		}
		r.mu.Lock()
		delete(r.watchers, ch)
		close(ch)
		r.mu.Unlock()
	}()
	return ch
}

func (r *Registry) notifyLocked(c Change) {
	for ch, svc := range r.watchers {
		if svc != "" && svc != c.Instance.Service {
			continue
		}
		for {
			select {
			case ch <- c:
			default:
				select { // full: drop the oldest
				case <-ch:
				default:
				}
				continue
			}
			break
		}
	}
}
