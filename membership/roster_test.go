package membership

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// The roster has no clock: these tests drive it with made-up times.

const ms = time.Millisecond

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type rosterRig struct {
	t      *testing.T
	r      *roster
	events []Event
}

func newRig(t *testing.T) *rosterRig {
	rig := &rosterRig{t: t}
	// Test profile: threshold 8, floor 50 ms, retention 30 s.
	rig.r = newRoster(DefaultPhiThreshold, 50*ms, 30*time.Second, func(e Event) { rig.events = append(rig.events, e) })
	return rig
}

// take returns and forgets the events emitted so far.
func (rig *rosterRig) take() []Event {
	evs := rig.events
	rig.events = nil
	return evs
}

func (rig *rosterRig) expect(want string) []Event {
	rig.t.Helper()
	evs := rig.take()
	if got := short(evs); got != want {
		rig.t.Fatalf("events %q, want %q", got, want)
	}
	return evs
}

// node returns a memberlist node that runs this package with the given
// heartbeat interval (0: a plain memberlist node with foreign metadata).
func node(name string, heartbeat time.Duration, meta map[string]string) *memberlist.Node {
	b := []byte("foreign")
	if heartbeat > 0 {
		b, _ = encodeMeta(meta, heartbeat, "")
	}
	return &memberlist.Node{Name: name, Addr: net.IPv4(127, 0, 0, 1), Port: 7946, Meta: b, PMax: 5}
}

// beat sends heartbeats from name every interval from start (exclusive)
// through end (inclusive), evaluating every interval/2 as the Node does,
// and returns the time of the last heartbeat.
func (rig *rosterRig) beat(name string, epoch uint64, seq *uint64, start, end time.Time, interval time.Duration) time.Time {
	last := start
	for at := start.Add(interval / 2); !at.After(end); at = at.Add(interval / 2) {
		rig.r.evaluate(at, 0)
		if at.Sub(last) >= interval {
			*seq++
			rig.r.heartbeat(name, epoch, *seq, at, 0)
			last = at
		}
	}
	return last
}

// silence evaluates every step from start until the first event or until,
// and returns the time of that evaluation.
func (rig *rosterRig) silence(start, until time.Time, step time.Duration, health int) time.Time {
	for at := start.Add(step); !at.After(until); at = at.Add(step) {
		rig.r.evaluate(at, health)
		if len(rig.events) > 0 {
			return at
		}
	}
	return until
}

func TestRosterSuspectAndRecover(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, map[string]string{"role": "grantor"}), t0, 0)
	join := rig.expect("join b")[0]
	if m := join.Member; m.State != StateAlive || m.Meta["role"] != "grantor" || m.Addr != "127.0.0.1:7946" || !m.LastHeard.Equal(t0) {
		t.Fatalf("join member %+v", m)
	}

	var seq uint64
	last := rig.beat("b", 1, &seq, t0, t0.Add(3*time.Second), 100*ms)
	rig.expect("") // steady heartbeats: never suspect
	m, _ := rig.r.get("b", last.Add(50*ms), 0)
	if m.State != StateAlive || m.Suspicion > 1 || !m.LastHeard.Equal(last) {
		t.Fatalf("steady member %+v", m)
	}

	// Silence: suspect at the first evaluation ≥ 380.6 ms after the last
	// heartbeat (100 ms + 5.612 · 50 ms).
	at := rig.silence(last, last.Add(2*time.Second), 50*ms, 0)
	sus := rig.expect("suspect b")[0]
	if d := at.Sub(last); d != 400*ms {
		t.Errorf("suspect after %v of silence, want 400ms", d)
	}
	if !sus.Time.Equal(at) || sus.Member.State != StateSuspect || sus.Member.Suspicion < DefaultPhiThreshold || sus.Member.Suspicion >= MaxSuspicion {
		t.Errorf("suspect event %+v", sus)
	}
	rig.r.evaluate(at.Add(time.Second), 0)
	rig.expect("") // reported once

	// A heartbeat recovers it at once, without waiting for an evaluation.
	back := at.Add(time.Second + 10*ms)
	seq++
	rig.r.heartbeat("b", 1, seq, back, 0)
	rec := rig.expect("recover b")[0]
	if !rec.Time.Equal(back) || rec.Member.State != StateAlive || rec.Member.Suspicion >= 1 {
		t.Errorf("recover event %+v", rec)
	}
}

func TestRosterDeadAndLeft(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("dead", 100*ms, nil), t0, 0)
	rig.r.join(node("left", 100*ms, nil), t0, 0)
	rig.take()

	rig.r.leaving("left", 0, 0)
	verdict := t0.Add(time.Second)
	rig.r.leave(node("dead", 100*ms, nil), verdict, 0)
	rig.r.leave(node("left", 100*ms, nil), verdict, 0)
	// An announced departure is reported at once; a death is held back for
	// leaveGrace, but shows in snapshots.
	if m := rig.expect("leave left")[0].Member; m.State != StateLeft || m.Suspicion != MaxSuspicion {
		t.Errorf("left: %+v", m)
	}
	if m, _ := rig.r.get("dead", verdict, 0); m.State != StateDead || m.Suspicion != MaxSuspicion {
		t.Errorf("dead before its event: %+v", m)
	}
	rig.r.evaluate(verdict.Add(leaveGrace-time.Nanosecond), 0)
	rig.expect("")
	rig.r.evaluate(verdict.Add(leaveGrace), 0)
	dead := rig.expect("dead dead")[0]
	if m := dead.Member; m.State != StateDead || m.Suspicion != MaxSuspicion || !dead.Time.Equal(verdict) {
		t.Errorf("dead: %+v", dead)
	}
	rig.r.leave(node("dead", 100*ms, nil), verdict.Add(time.Second), 0)
	rig.r.evaluate(verdict.Add(2*time.Second), 0)
	rig.expect("") // memberlist's duplicate is ignored

	// Gone members: heartbeats and announcements ignored, no evaluation
	// events, MaxSuspicion regardless of health, no heartbeats sent to them.
	rig.r.heartbeat("dead", 1, 1, t0.Add(2*time.Second), 0)
	rig.r.leaving("dead", 0, 0)
	rig.r.evaluate(t0.Add(10*time.Second), 7)
	rig.expect("")
	if m, ok := rig.r.get("dead", t0.Add(10*time.Second), 7); !ok || m.Suspicion != MaxSuspicion || m.State != StateDead {
		t.Errorf("dead member %+v, %v", m, ok)
	}
	if ts := rig.r.targets(); len(ts) != 0 {
		t.Errorf("heartbeat targets %v", ts)
	}

	// Forgotten after the retention time.
	rig.r.evaluate(t0.Add(31*time.Second-ms), 0)
	if _, ok := rig.r.get("dead", t0.Add(31*time.Second), 0); !ok {
		t.Error("forgotten too early")
	}
	rig.r.evaluate(t0.Add(31*time.Second), 0)
	if _, ok := rig.r.get("dead", t0.Add(31*time.Second), 0); ok {
		t.Error("not forgotten after the retention time")
	}

	// Rejoin: a fresh start.
	rig.r.join(node("left", 100*ms, nil), t0.Add(40*time.Second), 0)
	if m := rig.expect("join left")[0].Member; m.State != StateAlive || m.Suspicion >= 1 {
		t.Errorf("rejoined %+v", m)
	}
	rig.r.leave(node("left", 100*ms, nil), t0.Add(41*time.Second), 0)
	rig.r.evaluate(t0.Add(42*time.Second), 0)
	rig.expect("dead left") // the old announcement does not carry over
}

// memberlist may hand us its verdict before the announcement that preceded
// it on the wire.
func TestRosterLateLeaveAnnouncement(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("x", 100*ms, nil), t0, 0)
	rig.take()
	rig.r.heartbeat("x", 5, 1, t0.Add(100*ms), 0)
	verdict := t0.Add(time.Second)
	rig.r.leave(node("x", 100*ms, nil), verdict, 0)
	rig.r.leaving("x", 4, 0) // another process's announcement
	rig.expect("")
	rig.r.leaving("x", 5, 0)
	e := rig.expect("leave x")[0]
	if e.Member.State != StateLeft || !e.Time.Equal(verdict) {
		t.Errorf("%+v", e)
	}
	rig.r.evaluate(verdict.Add(time.Second), 0)
	rig.expect("")
}

func TestRosterRejoinBeforeDeadEvent(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("x", 100*ms, nil), t0, 0)
	rig.take()
	rig.r.leave(node("x", 100*ms, nil), t0.Add(time.Second), 0)
	rig.r.join(node("x", 100*ms, nil), t0.Add(time.Second+ms), 0) // refuted at once
	rig.expect("dead x, join x")
	rig.r.evaluate(t0.Add(2*time.Second), 0)
	rig.expect("")
}

func TestRosterLifeguardDiscount(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, nil), t0, 0)
	var seq uint64
	last := rig.beat("b", 1, &seq, t0, t0.Add(2*time.Second), 100*ms)
	rig.take()

	// 450 ms of silence: raw phi ≈ 11.9 (7 σ); with health 1 it is halved.
	at := last.Add(450 * ms)
	rig.r.evaluate(at, 1)
	rig.expect("")
	m, _ := rig.r.get("b", at, 1)
	raw, _ := rig.r.get("b", at, 0)
	if m.State != StateAlive || !near(m.Suspicion, raw.Suspicion/2, 1e-12) || raw.Suspicion < DefaultPhiThreshold {
		t.Errorf("discounted %v, raw %v", m.Suspicion, raw.Suspicion)
	}
	rig.r.evaluate(at, 0)
	rig.expect("suspect b")
	// The local node turns out to be the slow one: the suspicion it reports
	// falls back below the threshold.
	rig.r.evaluate(at, 7)
	rig.expect("recover b")
}

func TestRosterHeartbeatBookkeeping(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, nil), t0, 0)
	rig.take()
	var seq uint64
	last := rig.beat("b", 1, &seq, t0, t0.Add(2*time.Second), 100*ms)
	p := rig.r.peers["b"]
	mean, _, n := p.win.stats()
	if n != 19 || !near(mean, 0.1, 1e-9) { // 20 heartbeats, the first starts the history
		t.Fatalf("window n=%d mean=%v", n, mean)
	}

	// Duplicates and reordered heartbeats do not count.
	rig.r.heartbeat("b", 1, seq, last.Add(10*ms), 0)
	rig.r.heartbeat("b", 1, seq-3, last.Add(20*ms), 0)
	if _, _, n := p.win.stats(); n != 19 || !p.lastHeard.Equal(last) {
		t.Errorf("duplicate counted: n=%d lastHeard=%v", n, p.lastHeard)
	}

	// A restarted process (new epoch) starts a fresh history.
	rig.r.heartbeat("b", 2, 1, last.Add(30*ms), 0)
	if _, _, n := p.win.stats(); n != 0 || !p.lastHeard.Equal(last.Add(30*ms)) {
		t.Errorf("new epoch: n=%d", n)
	}

	// Lost heartbeats: the gap is recorded as one long interval.
	rig.r.heartbeat("b", 2, 5, last.Add(330*ms), 0)
	if mean, _, n := p.win.stats(); n != 1 || !near(mean, 0.3, 1e-9) {
		t.Errorf("gap: n=%d mean=%v", n, mean)
	}

	// Unknown senders are ignored.
	rig.r.heartbeat("nobody", 1, 1, last, 0)
	rig.r.leaving("nobody", 1, 0)
	if _, ok := rig.r.get("nobody", last, 0); ok {
		t.Error("heartbeat created a member")
	}
	// A leave announcement from another epoch is ignored.
	rig.r.leaving("b", 1, 0)
	if p.leaving {
		t.Error("stale leave announcement accepted")
	}
	rig.r.leaving("b", 2, 0)
	if !p.leaving {
		t.Error("leave announcement ignored")
	}
}

func TestRosterUpdate(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, map[string]string{"v": "1"}), t0, 0)
	var seq uint64
	rig.beat("b", 1, &seq, t0, t0.Add(time.Second), 100*ms)
	rig.take()

	rig.r.update(node("b", 100*ms, map[string]string{"v": "2"}), t0.Add(time.Second), 0)
	if m := rig.expect("update b")[0].Member; m.Meta["v"] != "2" {
		t.Errorf("updated %+v", m)
	}
	if _, _, n := rig.r.peers["b"].win.stats(); n == 0 {
		t.Error("metadata update reset the history")
	}
	// A changed heartbeat interval restarts the history.
	rig.r.update(node("b", 200*ms, map[string]string{"v": "2"}), t0.Add(time.Second), 0)
	rig.expect("update b")
	if _, _, n := rig.r.peers["b"].win.stats(); n != 0 {
		t.Error("history kept across an interval change")
	}
	// An update for a member we do not know is a join.
	rig.r.update(node("c", 100*ms, nil), t0, 0)
	rig.expect("join c")
}

func TestRosterPassiveMember(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("plain", 0, nil), t0, 0)
	if m := rig.expect("join plain")[0].Member; m.Meta != nil || m.Suspicion != 0 {
		t.Errorf("%+v", m)
	}
	rig.r.heartbeat("plain", 1, 1, t0.Add(time.Second), 0)
	rig.r.evaluate(t0.Add(time.Hour), 0)
	rig.expect("")
	if m, _ := rig.r.get("plain", t0.Add(time.Hour), 0); m.State != StateAlive || m.Suspicion != 0 {
		t.Errorf("%+v", m)
	}
	if ts := rig.r.targets(); len(ts) != 0 {
		t.Errorf("heartbeats sent to a passive member: %v", ts)
	}
	rig.r.leave(node("plain", 0, nil), t0.Add(time.Hour), 0)
	rig.r.evaluate(t0.Add(time.Hour+time.Second), 0)
	if m := rig.expect("dead plain")[0].Member; m.Suspicion != MaxSuspicion {
		t.Errorf("%+v", m)
	}
}

func TestRosterBootstrap(t *testing.T) {
	// No heartbeat after a join: an acceptable pause (mean = nominal,
	// stddev = 2·nominal): suspect after 100 + 5.612·200 ms = 1222 ms, at
	// the 1250 ms evaluation.
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, nil), t0, 0)
	rig.take()
	if at := rig.silence(t0, t0.Add(5*time.Second), 50*ms, 0); at.Sub(t0) != 1250*ms {
		t.Errorf("suspect after %v, want 1.25s", at.Sub(t0))
	}
	rig.expect("suspect b")

	// Once heartbeats flow, even with few samples, the sender is assumed
	// regular: suspect 400 ms after the last one.
	rig = newRig(t)
	rig.r.join(node("c", 100*ms, nil), t0, 0)
	rig.take()
	for i := range uint64(3) { // two intervals
		rig.r.heartbeat("c", 1, i+1, t0.Add(time.Duration(i+1)*100*ms), 0)
	}
	last := t0.Add(300 * ms)
	if at := rig.silence(last, last.Add(5*time.Second), 50*ms, 0); at.Sub(last) != 400*ms {
		t.Errorf("suspect after %v, want 400ms", at.Sub(last))
	}
	rig.expect("suspect c")
}

func TestRosterProbe(t *testing.T) {
	rig := newRig(t)
	rig.r.join(node("b", 100*ms, nil), t0, 0)
	rig.r.probe("b", 4*ms, encodeAck(t0.Add(time.Second)), t0.Add(2*ms))
	p := rig.r.peers["b"]
	if !p.probed || p.rtt != 4*ms || p.offset != time.Second {
		t.Errorf("probe: %v %v %v", p.probed, p.rtt, p.offset)
	}
	rig.r.probe("b", 6*ms, []byte("no clock"), t0)
	if p.rtt != 6*ms || p.offset != 0 {
		t.Errorf("probe without clock: %v %v", p.rtt, p.offset)
	}
	rig.r.probe("nobody", time.Millisecond, nil, t0) // ignored
}
