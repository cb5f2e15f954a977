package membership

import (
	"bytes"
	"maps"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// roster is this node's view of the other members: memberlist's verdicts
// plus a heartbeat history per member. It has no clock and no goroutines:
// every method takes the current time (and the local health score) from its
// caller, which holds the lock around it, so it is tested with made-up
// times. Transitions are reported through emit, in order.
type roster struct {
	threshold     float64
	minStd        time.Duration
	retention     time.Duration
	peers         map[string]*peer
	emit          func(Event)
	role          string // this node's Meta["role"]
	heartbeatRole string // Config.HeartbeatRole: heartbeats go only to members of this role
}

type peer struct {
	node      memberlist.Node // copy, for SendBestEffort and Addr
	meta      map[string]string
	nominal   time.Duration // its heartbeat interval; 0: passive, sends none
	hbRole    string        // its Config.HeartbeatRole: it heartbeats only members of this role
	gone      State         // StateAlive, or StateDead/StateLeft once memberlist says so
	suspect   bool          // as last reported by an event
	win       window
	epoch     uint64 // sender's process epoch of the heartbeats in win
	seq       uint64 // last heartbeat sequence number accepted
	heard     bool   // a heartbeat of this epoch has arrived
	lastHeard time.Time
	changed   time.Time // when it joined, or when it was declared gone
	leaving   bool      // it announced that it is leaving
	pending   bool      // declared dead, EventDead not sent yet (see leaveGrace)
	rtt       time.Duration
	offset    time.Duration
	probed    bool // rtt and offset are set
}

func newRoster(threshold float64, minStd, retention time.Duration, emit func(Event)) *roster {
	return &roster{
		threshold: threshold,
		minStd:    minStd,
		retention: retention,
		peers:     make(map[string]*peer),
		emit:      emit,
	}
}

// copyNode copies a memberlist node so that no memory is shared with it.
func copyNode(n *memberlist.Node) memberlist.Node {
	c := *n
	c.Addr = slices.Clone(n.Addr)
	c.Meta = bytes.Clone(n.Meta)
	return c
}

// suspicion returns p's discounted suspicion level at now.
func (r *roster) suspicion(p *peer, now time.Time, health int) float64 {
	switch {
	case p.gone.Gone():
		return MaxSuspicion
	case p.nominal <= 0, p.hbRole != "" && p.hbRole != r.role:
		return 0 // it sends this node no heartbeats
	}
	return discount(detectorSuspicion(&p.win, p.heard, now.Sub(p.lastHeard), p.nominal, r.minStd), health)
}

// member returns a snapshot of p at now.
func (r *roster) member(p *peer, now time.Time, health int) Member {
	s := r.suspicion(p, now, health)
	st := p.gone
	if st == StateAlive && s >= r.threshold {
		st = StateSuspect
	}
	return Member{
		Name:      p.node.Name,
		Addr:      p.node.Address(),
		Meta:      maps.Clone(p.meta),
		State:     st,
		Suspicion: s,
		LastHeard: p.lastHeard,
	}
}

func (r *roster) event(t EventType, p *peer, now time.Time, health int) {
	r.emit(Event{Type: t, Member: r.member(p, now, health), Time: now})
}

// join records that memberlist saw n join (or come back): a fresh history,
// suspicion 0, and the heartbeat clock started now.
func (r *roster) join(n *memberlist.Node, now time.Time, health int) {
	meta, nominal, err := decodeMeta(n.Meta)
	if err != nil {
		meta, nominal = nil, 0
	}
	meta, hbRole := splitHeartbeatRole(meta)
	if old, ok := r.peers[n.Name]; ok {
		r.flush(old, health)
	}
	p := &peer{
		node:      copyNode(n),
		meta:      meta,
		nominal:   nominal,
		hbRole:    hbRole,
		lastHeard: now,
		changed:   now,
	}
	r.peers[n.Name] = p
	r.event(EventJoin, p, now, health)
}

// update records new metadata for n.
func (r *roster) update(n *memberlist.Node, now time.Time, health int) {
	p, ok := r.peers[n.Name]
	if !ok || p.gone.Gone() {
		// memberlist only updates members it counts as alive, so we missed
		// the join: treat it as one.
		r.join(n, now, health)
		return
	}
	meta, nominal, err := decodeMeta(n.Meta)
	if err != nil {
		meta, nominal = nil, 0
	}
	meta, p.hbRole = splitHeartbeatRole(meta)
	p.node = copyNode(n)
	p.meta = meta
	if nominal != p.nominal {
		p.nominal = nominal
		p.win.reset()
		p.heard = false
	}
	r.event(EventUpdate, p, now, health)
}

// leaveGrace is how long an EventDead is held back for a leave
// announcement that may arrive just after memberlist's verdict: memberlist
// handles queued packets last in, first out, so an announcement and the
// departure broadcast that follows it can be handled in the wrong order.
// EventDead is sent by the first evaluation at least leaveGrace after the
// verdict; the member shows as StateDead meanwhile.
const leaveGrace = 25 * time.Millisecond

// leave records that memberlist saw n die or leave. memberlist does not say
// which, so a member that announced it was leaving counts as left and any
// other as dead (see leaveGrace).
func (r *roster) leave(n *memberlist.Node, now time.Time, health int) {
	p, ok := r.peers[n.Name]
	if !ok {
		p = &peer{node: copyNode(n), lastHeard: now}
		if meta, nominal, err := decodeMeta(n.Meta); err == nil {
			p.meta, p.nominal = meta, nominal
			p.meta, p.hbRole = splitHeartbeatRole(p.meta)
		}
		r.peers[n.Name] = p
	}
	if p.gone.Gone() {
		return
	}
	p.changed = now
	p.suspect = false
	if p.leaving {
		p.gone = StateLeft
		r.event(EventLeave, p, now, health)
		return
	}
	p.gone = StateDead
	p.pending = true
}

// flush sends the held-back EventDead of a member declared dead.
func (r *roster) flush(p *peer, health int) {
	if p.pending {
		p.pending = false
		r.event(EventDead, p, p.changed, health)
	}
}

// leaving records a member's announcement that it is about to leave. If
// memberlist's verdict came first, the pending death becomes a departure.
func (r *roster) leaving(name string, epoch uint64, health int) {
	p, ok := r.peers[name]
	if !ok || (p.heard && p.epoch != epoch) {
		return
	}
	switch {
	case p.pending:
		p.pending = false
		p.gone = StateLeft
		r.event(EventLeave, p, p.changed, health)
	case !p.gone.Gone():
		p.leaving = true
	}
}

// heartbeat records a heartbeat from name. Heartbeats from unknown or gone
// members are ignored (memberlist decides who is a member), so are
// duplicates and reordered ones. A heartbeat with a new epoch (the member's
// process restarted) starts a fresh history. A suspect member whose
// suspicion falls below the threshold recovers at once.
func (r *roster) heartbeat(name string, epoch, seq uint64, now time.Time, health int) {
	p, ok := r.peers[name]
	if !ok || p.gone.Gone() || p.nominal <= 0 {
		return
	}
	switch {
	case !p.heard || p.epoch != epoch:
		p.win.reset()
		p.epoch, p.heard = epoch, true
	case seq <= p.seq:
		return
	default:
		p.win.add(now.Sub(p.lastHeard).Seconds())
	}
	p.seq = seq
	p.lastHeard = now
	if p.suspect && r.suspicion(p, now, health) < r.threshold {
		p.suspect = false
		r.event(EventRecover, p, now, health)
	}
}

// probe records a direct probe's round-trip time and the member's clock
// reading carried in the ack (see encodeAck).
func (r *roster) probe(name string, rtt time.Duration, payload []byte, now time.Time) {
	p, ok := r.peers[name]
	if !ok {
		return
	}
	p.rtt, p.probed = rtt, true
	p.offset = 0
	if remote, ok := decodeAck(payload); ok {
		p.offset = clockOffset(remote, now, rtt)
	}
}

// clockOffset estimates how far a remote clock is ahead of the local one
// from a reading remote taken while a probe was in flight: the probe
// completed at local time now after rtt, so the reading was taken at about
// now − rtt/2 local time, give or take rtt/2.
func clockOffset(remote, now time.Time, rtt time.Duration) time.Duration {
	return remote.Sub(now.Add(-rtt / 2))
}

// evaluate re-computes every member's suspicion at now, reports threshold
// crossings, sends held-back deaths (see leaveGrace) and forgets members
// that have been gone for the retention time.
// Members are visited in name order so that events are deterministic.
func (r *roster) evaluate(now time.Time, health int) {
	for _, name := range slices.Sorted(maps.Keys(r.peers)) {
		p := r.peers[name]
		if p.gone.Gone() {
			if p.pending && now.Sub(p.changed) >= leaveGrace {
				r.flush(p, health)
			}
			if !p.pending && now.Sub(p.changed) >= r.retention {
				delete(r.peers, name)
			}
			continue
		}
		switch s := r.suspicion(p, now, health); {
		case !p.suspect && s >= r.threshold:
			p.suspect = true
			r.event(EventSuspect, p, now, health)
		case p.suspect && s < r.threshold:
			p.suspect = false
			r.event(EventRecover, p, now, health)
		}
	}
}

// get returns a snapshot of one member.
func (r *roster) get(name string, now time.Time, health int) (Member, bool) {
	p, ok := r.peers[name]
	if !ok {
		return Member{}, false
	}
	return r.member(p, now, health), true
}

// all returns snapshots of every member, in no particular order.
func (r *roster) all(now time.Time, health int) []Member {
	ms := make([]Member, 0, len(r.peers)+1)
	for _, p := range r.peers {
		ms = append(ms, r.member(p, now, health))
	}
	return ms
}

// targets returns the members that should get heartbeats: alive (in
// memberlist's view, suspect or not), running this package, and of the
// heartbeat role if there is one.
func (r *roster) targets() []memberlist.Node {
	var ts []memberlist.Node
	for _, p := range r.peers {
		if !p.gone.Gone() && p.nominal > 0 && (r.heartbeatRole == "" || p.meta["role"] == r.heartbeatRole) {
			ts = append(ts, p.node)
		}
	}
	return ts
}
