package membership

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Node is a member of a gossip cluster. Create it with [Start]; all methods
// are safe for concurrent use.
type Node struct {
	cfg   Config
	log   *slog.Logger
	epoch uint64 // random per Start: lets peers tell a restarted process apart

	ml   atomic.Pointer[memberlist.Memberlist]
	self memberlist.Node // copy of the local node as created

	meta    atomic.Pointer[[]byte] // encoded, for memberlist's NodeMeta
	metaMap map[string]string      // guarded by mu
	mu      sync.Mutex             // guards r, metaMap; never held while calling memberlist
	r       *roster
	// suspicion is memberlist's timing that SuspicionTimeout reports.
	suspicion struct {
		mult, maxMult int
		probe         time.Duration
	}
	queue  *eventQueue
	events chan Event
	seq    uint64 // heartbeat sequence; heartbeat loop only
	paused atomic.Bool
	left   atomic.Bool
	// nameTaken is the address of another member gossip says has this
	// node's name (set by the conflict delegate), or nil.
	nameTaken atomic.Pointer[string]
	lifecycle sync.Mutex // serialises Join, Leave, UpdateMeta and Shutdown
	closed    bool       // guarded by lifecycle
	stop      chan struct{}
	wg        sync.WaitGroup
}

// Start creates the local gossip member: it binds cfg.BindAddr:BindPort
// (TCP and UDP), starts probing, heartbeats and suspicion evaluation, and
// returns without contacting anyone; call [Node.Join] to join a cluster, or
// let others join this node. Call [Node.Shutdown] when done.
//
// Errors wrap [ErrConfig] (see [Config.Validate]) or [ErrStart].
func Start(cfg Config) (*Node, error) {
	n, err := newNode(cfg)
	if err != nil {
		return nil, err
	}
	mc := cfg.memberlistConfig(n.log)
	d := &delegates{n: n}
	mc.Delegate, mc.Events, mc.Ping, mc.Conflict = d, d, d, d
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	n.ml.Store(ml)
	n.self = copyNode(ml.LocalNode())
	n.suspicion.mult, n.suspicion.maxMult, n.suspicion.probe = mc.SuspicionMult, mc.SuspicionMaxTimeoutMult, mc.ProbeInterval

	n.wg.Add(3)
	go func() { defer n.wg.Done(); n.queue.run(n.events, n.stop) }()
	go n.heartbeatLoop()
	go n.evaluateLoop(cfg.HeartbeatInterval / 2)
	n.log.Debug("membership started", "addr", n.self.Address(), "profile", cfg.Profile)
	return n, nil
}

// newNode validates cfg and builds a Node without memberlist and without
// goroutines.
func newNode(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pp, _ := cfg.Profile.params()
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	n := &Node{
		cfg:     cfg,
		log:     logger.With("node", cfg.Name),
		epoch:   rand.Uint64(),
		metaMap: maps.Clone(cfg.Meta),
		queue:   newEventQueue(EventQueueSize),
		events:  make(chan Event),
		stop:    make(chan struct{}),
	}
	n.r = newRoster(cfg.PhiThreshold, pp.minStdDev, cfg.DeadRetention, n.queue.push)
	n.r.role, n.r.heartbeatRole = cfg.Meta["role"], cfg.HeartbeatRole
	meta, err := encodeMeta(cfg.Meta, cfg.HeartbeatInterval, cfg.HeartbeatRole)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err) // unreachable after Validate
	}
	n.meta.Store(&meta)
	return n, nil
}

// Join contacts the seeds (host:port addresses of existing members; a host
// without a port means this node's own port; a host name is resolved and
// every address it has is tried), exchanges full state with each that
// answers, and returns how many answered. Joining is then completed by
// gossip: expect [EventJoin] for each member over the next gossip rounds.
// It blocks for up to the profile's TCP timeout (10 s LAN, 1 s test) per
// unreachable seed. A node that is first in its cluster need not call Join.
// Each seed that does not answer while another does (this node's own
// address, listed among the seeds, always does) is logged: as a warning
// when its gossip key is not this node's.
//
// Errors wrap [ErrJoin] (none answered, or seeds is empty) or [ErrClosed].
func (n *Node) Join(seeds []string) (int, error) {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if n.closed {
		return 0, ErrClosed
	}
	if len(seeds) == 0 {
		return 0, fmt.Errorf("%w: no seeds", ErrJoin)
	}
	k, failed := n.join(seeds)
	if k == 0 {
		return 0, fmt.Errorf("%w: %s", ErrJoin, strings.Join(failed, "; "))
	}
	for _, f := range failed {
		if strings.Contains(f, "crypt") { // memberlist's words for a key that is not the seed's
			n.log.Warn("gossip seed not joined: "+f, "hint", "the seed gossips with another key, or none, than this member's: give every member the same key, or none")
		} else {
			n.log.Info("gossip seed not joined: "+f, "hint", "down or unreachable (it may not have started yet)")
		}
	}
	return k, nil
}

// join joins each seed in turn and returns how many answered and, on one
// line each, why the others did not. memberlist's Join of them all drops
// the others' errors once one answers, and a node's own address, listed
// among a cluster's seeds, always does: a member whose gossip key was not
// the others' joined no one else without a word (found by an outside
// client).
func (n *Node) join(seeds []string) (k int, failed []string) {
	ml := n.ml.Load()
	for _, seed := range seeds {
		answered, err := ml.Join([]string{seed})
		k += answered
		if err != nil {
			failed = append(failed, oneLine(err))
		}
	}
	return k, failed
}

// KeepJoined joins seeds again, every interval until Shutdown or Leave,
// while none of them is a live member: memberlist never rejoins on its
// own, so when the seeds restart (a grantor that is the only one: to the
// others, a dead member that never comes back) the members that joined
// through them went on without them for good, and their deaths reached
// no grantor (found by an outside client). A suspect seed counts as not
// live: one that restarted on its address before the members declared it
// dead answers their probes but knows none of them, and sends them no
// heartbeats (it heard of its members only at memberlist's next
// push-pull, 30 s with the LAN profile). Seeds given by host name are
// compared by the addresses it resolves to. A Join in progress when
// Shutdown or Leave is called delays it, at most the profile's TCP timeout
// per unreachable seed.
func (n *Node) KeepJoined(seeds []string, every time.Duration) {
	if len(seeds) == 0 || every <= 0 {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		rejoined := false // logged once while the seeds stay away
		for {
			select {
			case <-n.stop:
				return
			case <-t.C:
			}
			if n.seedLive(seeds) {
				rejoined = false
				continue
			}
			// TryLock: Shutdown holds the lock while it waits for this
			// goroutine; Leave and Join hold it too. Next tick, then.
			if !n.lifecycle.TryLock() {
				continue
			}
			if !n.closed && !n.left.Load() {
				k, err := n.ml.Load().Join(seeds)
				switch {
				case err == nil && !rejoined:
					rejoined = true
					n.log.Info("rejoined gossip: no seed was a live member", "seeds", seeds, "answered", k)
				case err != nil:
					n.log.Debug("rejoin failed", "seeds", seeds, "err", oneLine(err))
				}
			}
			n.lifecycle.Unlock()
		}
	}()
}

// seedLive reports whether one of seeds is the address of a member other
// than this node that is alive and not suspect.
func (n *Node) seedLive(seeds []string) bool {
	live := map[string]bool{}
	for _, m := range n.Members() {
		if m.Name != n.cfg.Name && m.State == StateAlive {
			live[m.Addr] = true
		}
	}
	for _, seed := range seeds {
		host, port, err := net.SplitHostPort(seed)
		if err != nil {
			continue
		}
		addrs := []string{host}
		if net.ParseIP(host) == nil {
			addrs, _ = net.LookupHost(host)
		}
		for _, a := range addrs {
			if live[net.JoinHostPort(a, port)] {
				return true
			}
		}
	}
	return false
}

// NameConflict reports a member gossip has told this node of that has its
// name at another address: another process given the same name (whose
// fate gossip then gives this one: the others keep the address they knew
// first), or this node's own process before a restart on another port,
// which gossip forgets once it is declared dead. The seeds' state comes
// with [Node.Join], so a conflict there is known when Join returns.
func (n *Node) NameConflict() (addr string, ok bool) {
	if a := n.nameTaken.Load(); a != nil {
		return *a, true
	}
	return "", false
}

// oneLine is err's message on one line: memberlist joins the error of
// each seed in a list of its own ("1 error occurred:\n\t* …\n\n"), which
// printed in a log line as "1 error occurred:; \t* …; ; ".
func oneLine(err error) string {
	var list interface{ WrappedErrors() []error }
	if errors.As(err, &list) {
		var msgs []string
		for _, e := range list.WrappedErrors() {
			msgs = append(msgs, oneLine(e))
		}
		return strings.Join(msgs, "; ")
	}
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Name returns the local node's name.
func (n *Node) Name() string { return n.cfg.Name }

// Addr returns the host:port other members reach this node at: the bound
// address and port, or the advertise address if one is configured (with
// BindAddr "0.0.0.0", a private address of this host).
func (n *Node) Addr() string { return n.self.Address() }

// Members returns every member this node knows, itself included, sorted by
// name. Dead and departed members stay listed (StateDead, StateLeft,
// Suspicion MaxSuspicion) for Config.DeadRetention. Suspicion is computed
// at the time of the call, so a member may show as StateSuspect up to half
// a heartbeat interval before its [EventSuspect] is sent.
func (n *Node) Members() []Member {
	h, now := n.LocalHealth(), time.Now()
	n.mu.Lock()
	ms := n.r.all(now, h)
	ms = append(ms, n.selfMember(now))
	n.mu.Unlock()
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.Name, b.Name) })
	return ms
}

// Member returns one member (or the local node) by name.
func (n *Node) Member(name string) (Member, bool) {
	h, now := n.LocalHealth(), time.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if name == n.cfg.Name {
		return n.selfMember(now), true
	}
	return n.r.get(name, now, h)
}

// selfMember must be called with mu held.
func (n *Node) selfMember(now time.Time) Member {
	st := StateAlive
	if n.left.Load() {
		st = StateLeft
	}
	return Member{
		Name:      n.cfg.Name,
		Addr:      n.self.Address(),
		Meta:      maps.Clone(n.metaMap),
		State:     st,
		LastHeard: now,
	}
}

// Events returns the channel of changes in this node's view of the other
// members (never of itself). It is the same channel on every call, and it
// is closed by [Node.Shutdown]. Each event is received once: with several
// readers, each gets some of the events, so fan them out from one reader.
//
// Events arrive in the order this node observed them; for any one member
// that is causal order (a Join before its Suspect, Recover, Update or Dead;
// a Dead or Leave ends a suspicion without a Recover). EventDead is held
// back briefly (see [EventDead]), so [Node.Member] may show StateDead a
// little before it arrives.
//
// memberlist's goroutines and the evaluator never wait for the reader:
// events wait in a queue of [EventQueueSize] behind the (unbuffered)
// channel, fed to it by a goroutine of the Node. When the queue is full the
// oldest waiting event other than Dead and Leave is dropped (counted by
// [Node.Dropped]); Dead and Leave are never dropped, so with a reader that
// stops reading altogether the queue grows by one per departure. A reader
// that sees Dropped increase should resynchronise from [Node.Members].
// Events still queued at Shutdown are discarded.
func (n *Node) Events() <-chan Event { return n.events }

// Dropped returns how many events were discarded because the reader of
// [Node.Events] lagged.
func (n *Node) Dropped() uint64 { return n.queue.droppedCount() }

// LocalHealth returns memberlist's health score for the local node (its
// "awareness"): 0 is healthy; it rises, up to 7 with the default settings,
// as this node misses acks or has to refute suspicions, which usually means
// this node is the slow one. Suspicion levels are divided by
// 1 + LocalHealth.
func (n *Node) LocalHealth() int {
	if ml := n.ml.Load(); ml != nil {
		return ml.GetHealthScore()
	}
	return 0
}

// SuspicionTimeout returns how long gossip takes, at most, from a probe
// of a member that fails to the verdict that it is dead, at the current
// number of live members: one probe interval (stretched by the local
// health score, as memberlist stretches it) and memberlist's longest
// suspicion timeout, SuspicionMaxTimeoutMult · SuspicionMult ·
// max(1, log10 n) · ProbeInterval (fast profile: 0.25 + 2.5 s; LAN, below
// ten members: 1 + 24 s, which Lifeguard's confirmations shorten to 4 s). A
// member that is alive refutes a suspicion well within it: a verdict that
// comes later than that after this node resumed from a stall rests on
// evidence gathered since. 0 if the node was never started.
func (n *Node) SuspicionTimeout() time.Duration {
	ml := n.ml.Load()
	if ml == nil {
		return 0
	}
	s := n.suspicion
	scale := math.Max(1, math.Log10(float64(max(1, ml.NumMembers()))))
	timeout := time.Duration(float64(s.mult) * scale * float64(s.probe))
	return time.Duration(s.maxMult)*timeout + time.Duration(1+ml.GetHealthScore())*s.probe
}

// RTT returns the round-trip time of the last direct probe of the named
// member that was acknowledged (memberlist probes one member per probe
// interval, so each member is sampled about once per interval × members).
// Indirect and TCP fallback probes give no sample. False if there is none.
func (n *Node) RTT(name string) (time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.r.peers[name]
	if !ok || !p.probed {
		return 0, false
	}
	return p.rtt, true
}

// ClockOffset estimates how far the named member's wall clock is ahead of
// the local one (negative: behind), from the clock reading it put in its
// ack to the last direct probe, and returns that probe's RTT: the estimate
// is off by at most about rtt/2 plus scheduling delays. False if there is
// no sample, or the member does not run this package.
func (n *Node) ClockOffset(name string) (offset, rtt time.Duration, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, ok := n.r.peers[name]
	if !ok || !p.probed || p.nominal <= 0 {
		return 0, 0, false
	}
	return p.offset, p.rtt, true
}

// UpdateMeta replaces the local node's metadata and gossips it; others see
// [EventUpdate]. It waits until the update has been sent to at least one
// member, or timeout (≤ 0: DefaultLeaveTimeout).
//
// Errors wrap [ErrMeta], [ErrTimeout] (the update stays in effect and
// gossip carries it later) or [ErrClosed].
func (n *Node) UpdateMeta(meta map[string]string, timeout time.Duration) error {
	enc, err := encodeMeta(meta, n.cfg.HeartbeatInterval, n.cfg.HeartbeatRole)
	if err != nil {
		return err
	}
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if n.closed {
		return ErrClosed
	}
	n.mu.Lock()
	n.metaMap = maps.Clone(meta)
	n.r.role = meta["role"]
	n.mu.Unlock()
	n.meta.Store(&enc)
	if timeout <= 0 {
		timeout = DefaultLeaveTimeout
	}
	if err := n.ml.Load().UpdateNode(timeout); err != nil {
		return fmt.Errorf("%w: metadata update not sent within %v: %v", ErrTimeout, timeout, err)
	}
	return nil
}

// Leave announces that this node is leaving, stops its heartbeats and
// broadcasts its departure; the others send [EventLeave]. It waits until the
// broadcast has been sent to at least one member, or timeout (≤ 0:
// DefaultLeaveTimeout). The node keeps gossiping until [Node.Shutdown],
// which should follow. Calling Leave again does nothing.
//
// The announcement is one UDP packet to each member, sent just before the
// broadcast; a member that misses it sends [EventDead] instead of
// [EventLeave].
//
// Errors wrap [ErrTimeout] or [ErrClosed].
func (n *Node) Leave(timeout time.Duration) error {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.left.Swap(true) {
		return nil
	}
	ml := n.ml.Load()
	msg := encodeLeaving(n.cfg.Name, n.epoch)
	n.mu.Lock()
	targets := n.r.targets()
	n.mu.Unlock()
	for _, t := range targets {
		if err := ml.SendBestEffort(&t, msg); err != nil {
			n.log.Debug("leave announcement not sent", "to", t.Name, "err", err)
		}
	}
	if timeout <= 0 {
		timeout = DefaultLeaveTimeout
	}
	if err := ml.Leave(timeout); err != nil {
		return fmt.Errorf("%w: leave not broadcast within %v: %v", ErrTimeout, timeout, err)
	}
	n.log.Debug("membership left")
	return nil
}

// Shutdown stops gossip, heartbeats and evaluation, waits for this
// package's goroutines to end and closes the [Node.Events] channel. Without
// a [Node.Leave] first, the others declare this node dead once their probes
// fail. It waits for a Join, Leave or UpdateMeta in progress. Calling it
// again does nothing; other methods then return [ErrClosed], and Members
// and Member return the last known view.
func (n *Node) Shutdown() error {
	n.lifecycle.Lock()
	defer n.lifecycle.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	close(n.stop)
	n.wg.Wait()
	// memberlist logs transport errors on shutdown and always returns nil.
	_ = n.ml.Load().Shutdown()
	n.log.Debug("membership shut down")
	return nil
}

// pauseHeartbeats stops (true) or resumes (false) sending heartbeats while
// gossip goes on: a test hook to simulate a process that is alive for
// memberlist but silent.
func (n *Node) pauseHeartbeats(pause bool) { n.paused.Store(pause) }

func (n *Node) heartbeatLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.sendHeartbeats()
		}
	}
}

func (n *Node) sendHeartbeats() {
	if n.paused.Load() || n.left.Load() {
		return
	}
	n.seq++
	msg := encodeHeartbeat(n.cfg.Name, n.epoch, n.seq)
	n.mu.Lock()
	targets := n.r.targets()
	n.mu.Unlock()
	ml := n.ml.Load()
	for _, t := range targets {
		if err := ml.SendBestEffort(&t, msg); err != nil {
			n.log.Debug("heartbeat not sent", "to", t.Name, "err", err)
		}
	}
}

func (n *Node) evaluateLoop(every time.Duration) {
	defer n.wg.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
			n.evaluate(time.Now())
		}
	}
}

func (n *Node) evaluate(now time.Time) {
	h := n.LocalHealth()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.r.evaluate(now, h)
}

// delegates receives memberlist's callbacks. memberlist calls NotifyJoin,
// NotifyLeave and NotifyUpdate one at a time while holding its node lock,
// and the others from its packet and probe goroutines; so each takes only
// n.mu, briefly, and never calls back into memberlist.
type delegates struct{ n *Node }

var (
	_ memberlist.Delegate         = (*delegates)(nil)
	_ memberlist.EventDelegate    = (*delegates)(nil)
	_ memberlist.PingDelegate     = (*delegates)(nil)
	_ memberlist.ConflictDelegate = (*delegates)(nil)
)

// NotifyConflict notes a member that has this node's name at another
// address (memberlist keeps the address it knew first: here, this node's
// own); NameConflict reports it.
func (d *delegates) NotifyConflict(existing, other *memberlist.Node) {
	if existing.Name == d.n.cfg.Name {
		addr := other.Address()
		d.n.nameTaken.Store(&addr)
	}
}

func (d *delegates) NodeMeta(limit int) []byte {
	b := *d.n.meta.Load()
	if len(b) > limit {
		return nil // cannot happen: encodeMeta enforces MaxMetaSize
	}
	return b
}

func (d *delegates) NotifyMsg(b []byte) {
	m, err := decodeMessage(b)
	if err != nil {
		d.n.log.Debug("ignoring malformed message", "len", len(b))
		return
	}
	if m.name == d.n.cfg.Name {
		return
	}
	now := time.Now()
	h := d.n.LocalHealth()
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	switch m.kind {
	case msgHeartbeat:
		d.n.r.heartbeat(m.name, m.epoch, m.seq, now, h)
	case msgLeaving:
		d.n.r.leaving(m.name, m.epoch, h)
	}
}

func (d *delegates) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegates) LocalState(join bool) []byte                { return nil }
func (d *delegates) MergeRemoteState(buf []byte, join bool)     {}

func (d *delegates) NotifyJoin(node *memberlist.Node) {
	d.membership(node, (*roster).join)
}

func (d *delegates) NotifyLeave(node *memberlist.Node) {
	d.membership(node, (*roster).leave)
}

func (d *delegates) NotifyUpdate(node *memberlist.Node) {
	d.membership(node, (*roster).update)
}

func (d *delegates) membership(node *memberlist.Node, f func(*roster, *memberlist.Node, time.Time, int)) {
	if node.Name == d.n.cfg.Name {
		return
	}
	now := time.Now()
	h := d.n.LocalHealth()
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	f(d.n.r, node, now, h)
}

func (d *delegates) AckPayload() []byte { return encodeAck(time.Now()) }

func (d *delegates) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	now := time.Now()
	d.n.mu.Lock()
	defer d.n.mu.Unlock()
	d.n.r.probe(other.Name, rtt, payload, now)
}
