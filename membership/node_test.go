package membership_test

import (
	"bytes"
	"errors"
	"maps"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/membership"
	"github.com/leased/leased/membership/membershiptest"
)

// These tests run real memberlist instances on 127.0.0.1 with ProfileTest
// and wait on events, never on guessed sleeps.

const wait = membershiptest.Timeout

func TestClusterConverges(t *testing.T) {
	nodes := membershiptest.Cluster(t, "c", "a", "b") // "c" is the seed
	addrs := map[string]string{}
	for _, n := range nodes {
		addrs[n.Name()] = n.Addr()
	}
	for _, n := range nodes {
		ms := n.Members()
		if got := membershiptest.Names(ms); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("%s: members %v", n.Name(), got)
		}
		for _, m := range ms {
			if m.State != membership.StateAlive || m.Addr != addrs[m.Name] {
				t.Errorf("%s sees %+v, want alive at %s", n.Name(), m, addrs[m.Name])
			}
			if m.Name == n.Name() && m.Suspicion != 0 {
				t.Errorf("%s: own suspicion %v", n.Name(), m.Suspicion)
			}
		}
		if m, ok := n.Member(n.Name()); !ok || m.Addr != n.Addr() {
			t.Errorf("%s: Member(self) = %+v, %v", n.Name(), m, ok)
		}
		if _, ok := n.Member("nobody"); ok {
			t.Errorf("%s: Member(nobody) found", n.Name())
		}
		if h := n.LocalHealth(); h < 0 {
			t.Errorf("%s: health %d", n.Name(), h)
		}
	}
	if _, port, _ := net.SplitHostPort(nodes[0].Addr()); port == "0" {
		t.Errorf("Addr %s does not name the bound port", nodes[0].Addr())
	}
}

// TestProbeSamples waits for memberlist's direct probes to give RTT and
// clock samples (each node probes one member per 100 ms).
func TestProbeSamples(t *testing.T) {
	nodes := membershiptest.Cluster(t, "a", "b")
	a := nodes[0]
	deadline := time.Now().Add(wait)
	for {
		rtt, ok := a.RTT("b")
		offset, rtt2, ok2 := a.ClockOffset("b")
		if ok && ok2 {
			if rtt <= 0 || rtt > time.Second || rtt2 <= 0 {
				t.Errorf("rtt %v / %v", rtt, rtt2)
			}
			// Same machine, same clock: the estimate is off only by
			// scheduling delays.
			if offset.Abs() > rtt2/2+250*time.Millisecond {
				t.Errorf("clock offset %v with rtt %v on one machine", offset, rtt2)
			}
			t.Logf("rtt %v, clock offset %v", rtt, offset)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no probe sample")
		}
		time.Sleep(20 * time.Millisecond) // polling for a sample, not waiting for time to pass
	}
	if _, ok := a.RTT("nobody"); ok {
		t.Error("RTT for an unknown member")
	}
}

func TestMetadata(t *testing.T) {
	meta := func(name string) map[string]string {
		return map[string]string{"role": "grantor", "nats_url": "nats://127.0.0.1:42" + name, "version": "v0"}
	}
	var cfgs []membership.Config
	for _, name := range []string{"1", "2", "3"} {
		c := membership.TestConfig(name)
		c.Meta = meta(name)
		cfgs = append(cfgs, c)
	}
	nodes := membershiptest.Start(t, cfgs...)
	for _, n := range nodes {
		for _, m := range n.Members() {
			if !maps.Equal(m.Meta, meta(m.Name)) {
				t.Errorf("%s sees %s with %v", n.Name(), m.Name, m.Meta)
			}
		}
	}
	// Snapshots are copies.
	m, _ := nodes[0].Member("2")
	m.Meta["role"] = "changed"
	if again, _ := nodes[0].Member("2"); again.Meta["role"] != "grantor" {
		t.Error("Member returned shared metadata")
	}

	// An update reaches the others as EventUpdate.
	updated := map[string]string{"role": "draining"}
	if err := nodes[0].UpdateMeta(updated, wait); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		e, skipped := membershiptest.WaitFor(t, n, wait, membershiptest.Is(membership.EventUpdate, "1"))
		if !maps.Equal(e.Member.Meta, updated) {
			t.Errorf("%s: update carries %v (skipped %s)", n.Name(), e.Member.Meta, membershiptest.Describe(skipped))
		}
	}
	if self, _ := nodes[0].Member("1"); !maps.Equal(self.Meta, updated) {
		t.Errorf("own metadata %v", self.Meta)
	}
	if err := nodes[0].UpdateMeta(map[string]string{"": "x"}, wait); !errors.Is(err, membership.ErrMeta) {
		t.Errorf("invalid update: %v", err)
	}
}

// TestKilledNodeIsDeclaredDead: a node that stops without leaving is first
// suspected by the heartbeat detector, then declared dead by memberlist.
func TestKilledNodeIsDeclaredDead(t *testing.T) {
	nodes := membershiptest.Cluster(t, "a", "b", "c")
	killed := time.Now()
	if err := nodes[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[:2] {
		dead, skipped := membershiptest.WaitFor(t, n, wait, membershiptest.Is(membership.EventDead, "c"))
		if m := dead.Member; m.State != membership.StateDead || m.Suspicion != membership.MaxSuspicion {
			t.Errorf("%s: dead event member %+v", n.Name(), m)
		}
		if m, _ := n.Member("c"); m.State != membership.StateDead || m.Suspicion != membership.MaxSuspicion {
			t.Errorf("%s: Member(c) = %+v", n.Name(), m)
		}
		if got := dead.Time.Sub(killed); got > 5*time.Second {
			t.Errorf("%s: declared dead after %v", n.Name(), got)
		}
		i := slices.IndexFunc(skipped, func(e membership.Event) bool {
			return e.Type == membership.EventSuspect && e.Member.Name == "c" && !e.Time.Before(killed)
		})
		if i < 0 {
			t.Errorf("%s: no EventSuspect before EventDead (events: %s)", n.Name(), membershiptest.Describe(skipped))
			continue
		}
		t.Logf("%s: c suspect after %v, dead after %v", n.Name(),
			skipped[i].Time.Sub(killed).Round(time.Millisecond), dead.Time.Sub(killed).Round(time.Millisecond))
	}
}

func TestGracefulLeave(t *testing.T) {
	nodes := membershiptest.Cluster(t, "a", "b", "c")
	left := time.Now()
	if err := nodes[2].Leave(wait); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].Leave(wait); err != nil {
		t.Errorf("second Leave: %v", err)
	}
	if self, _ := nodes[2].Member("c"); self.State != membership.StateLeft {
		t.Errorf("own state after Leave: %v", self.State)
	}
	for _, n := range nodes[:2] {
		e, skipped := membershiptest.WaitFor(t, n, wait, func(e membership.Event) bool {
			return e.Member.Name == "c" && (e.Type == membership.EventLeave || e.Type == membership.EventDead)
		})
		if e.Type != membership.EventLeave || e.Member.State != membership.StateLeft || e.Member.Suspicion != membership.MaxSuspicion {
			t.Errorf("%s: %v %+v (skipped %s)", n.Name(), e.Type, e.Member, membershiptest.Describe(skipped))
		}
		t.Logf("%s: c left after %v", n.Name(), e.Time.Sub(left).Round(time.Millisecond))
	}
}

// TestPausedHeartbeats simulates a process that memberlist still finds
// alive (it answers probes) but that has gone silent: its suspicion at the
// others crosses the threshold, and falls back when heartbeats resume.
func TestPausedHeartbeats(t *testing.T) {
	nodes := membershiptest.Cluster(t, "a", "b", "c")
	c := nodes[2]
	paused := time.Now()
	membership.PauseHeartbeats(c, true)
	notDead := func(n *membership.Node, evs []membership.Event) {
		t.Helper()
		for _, e := range evs {
			if e.Member.Name == "c" && e.Type != membership.EventSuspect && e.Type != membership.EventRecover {
				t.Errorf("%s: unexpected %v c", n.Name(), e.Type)
			}
		}
	}
	for _, n := range nodes[:2] {
		e, skipped := membershiptest.WaitFor(t, n, wait, func(e membership.Event) bool {
			return e.Type == membership.EventSuspect && e.Member.Name == "c" && !e.Time.Before(paused)
		})
		notDead(n, skipped)
		if m := e.Member; m.State != membership.StateSuspect || m.Suspicion < membership.DefaultPhiThreshold || m.Suspicion >= membership.MaxSuspicion {
			t.Errorf("%s: suspect event member %+v", n.Name(), m)
		}
		t.Logf("%s: c suspect %v after its heartbeats stopped (suspicion %.1f)", n.Name(), e.Time.Sub(paused).Round(time.Millisecond), e.Member.Suspicion)
	}
	for _, n := range nodes[:2] {
		if m, _ := n.Member("c"); m.State.Gone() {
			t.Errorf("%s: memberlist declared c %v", n.Name(), m.State)
		}
	}

	resumed := time.Now()
	membership.PauseHeartbeats(c, false)
	for _, n := range nodes[:2] {
		e, skipped := membershiptest.WaitFor(t, n, wait, membershiptest.Is(membership.EventRecover, "c"))
		notDead(n, skipped)
		if m := e.Member; m.State != membership.StateAlive || m.Suspicion >= membership.DefaultPhiThreshold {
			t.Errorf("%s: recover event member %+v", n.Name(), m)
		}
		t.Logf("%s: c recovered %v after heartbeats resumed", n.Name(), e.Time.Sub(resumed).Round(time.Millisecond))
	}
}

func TestShutdown(t *testing.T) {
	// Goroutines of nodes shut down by earlier tests may still be unwinding
	// after their WaitGroup.Done: wait for them to be gone first.
	before := settledLoops(t, 0)
	n, err := membership.Start(membership.TestConfig("solo"))
	if err != nil {
		t.Fatal(err)
	}
	if got := loops(); got != before+3 {
		t.Errorf("%d loop goroutines running, want %d", got, before+3)
	}
	if err := n.Leave(time.Second); err != nil { // alone: returns at once
		t.Errorf("Leave: %v", err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if _, ok := <-n.Events(); ok {
		t.Error("events channel open after Shutdown")
	}
	if got := settledLoops(t, before); got != before {
		t.Errorf("%d loop goroutines left after Shutdown, want %d", got, before)
	}
	if _, err := n.Join([]string{"127.0.0.1:1"}); !errors.Is(err, membership.ErrClosed) {
		t.Errorf("Join after Shutdown: %v", err)
	}
	if err := n.Leave(time.Second); !errors.Is(err, membership.ErrClosed) {
		t.Errorf("Leave after Shutdown: %v", err)
	}
	if err := n.UpdateMeta(nil, time.Second); !errors.Is(err, membership.ErrClosed) {
		t.Errorf("UpdateMeta after Shutdown: %v", err)
	}
	if ms := n.Members(); len(ms) != 1 || ms[0].Name != "solo" || ms[0].State != membership.StateLeft {
		t.Errorf("Members after Shutdown: %+v", ms)
	}
}

// loops counts the goroutines that Start created: the event dispatcher, the
// heartbeat loop and the evaluator (nodes of earlier tests, all shut down,
// must not leave any).
// settledLoops waits (up to a second) for the number of loop goroutines to
// reach want: a goroutine that has called its WaitGroup's Done still shows in
// the stack dump until it has returned, and there is no event for that.
func settledLoops(t *testing.T, want int) int {
	t.Helper()
	got := loops()
	for deadline := time.Now().Add(time.Second); got != want && time.Now().Before(deadline); got = loops() {
		time.Sleep(5 * time.Millisecond)
	}
	return got
}

func loops() int {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) {
			buf = buf[:k]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/leased/leased/membership.Start") {
			count++
		}
	}
	return count
}

func TestJoinErrors(t *testing.T) {
	n, err := membership.Start(membership.TestConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown() })
	if _, err := n.Join(nil); !errors.Is(err, membership.ErrJoin) {
		t.Errorf("Join(nil): %v", err)
	}
	// A port nobody listens on: refused at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	k, err := n.Join([]string{closed})
	if !errors.Is(err, membership.ErrJoin) || k != 0 {
		t.Errorf("Join(%s) = %d, %v", closed, k, err)
	}
	// On one line, naming the seed (it read "1 error occurred:\n\t* …").
	if msg := err.Error(); strings.ContainsAny(msg, "\n\t") || strings.Contains(msg, "error occurred") || !strings.Contains(msg, closed) {
		t.Errorf("Join error %q: want one line naming %s", msg, closed)
	}
}

func TestStartErrors(t *testing.T) {
	a, err := membership.Start(membership.TestConfig("a"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	_, port, _ := net.SplitHostPort(a.Addr())
	c := membership.TestConfig("b")
	c.BindPort, _ = strconv.Atoi(port)
	if b, err := membership.Start(c); !errors.Is(err, membership.ErrStart) {
		if b != nil {
			b.Shutdown()
		}
		t.Errorf("Start on a port in use: %v", err)
	}
}

// A second process that joins under a name a live member has learns of
// it (NameConflict): gossip keeps the first's address, and when the first
// died both were declared dead (an outside client's two registrations on
// one --node were both removed when one process was killed).
func TestJoinReportsANameInUse(t *testing.T) {
	a, err := membership.Start(membership.TestConfig("host1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown() })
	b, err := membership.Start(membership.TestConfig("host1"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Shutdown() })
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	if addr, ok := b.NameConflict(); !ok || addr != a.Addr() {
		t.Fatalf("joined as host1, which %s is: conflict %q, %v; want it named", a.Addr(), addr, ok)
	}
	// Another name: no conflict.
	c, err := membership.Start(membership.TestConfig("host2"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	if _, err := c.Join([]string{a.Addr()}); err != nil {
		t.Fatal(err)
	}
	if addr, ok := c.NameConflict(); ok {
		t.Errorf("host2 reports a conflict with %s", addr)
	}
}

// With a secret key, gossip is encrypted and authenticated: members with
// the key form a cluster, and a node without it, or with another, cannot
// join it or speak in it (without a key, anyone who reached the port
// declared a member dead with one UDP packet, ending its registrations;
// found by an outside client). A key of the wrong size is refused.
func TestSecretKeyKeepsOutsidersOut(t *testing.T) {
	keyed := func(name string, key []byte) membership.Config {
		c := membership.TestConfig(name)
		c.SecretKey = key
		return c
	}
	key := bytes.Repeat([]byte{7}, 32)
	nodes := membershiptest.Start(t, keyed("a", key), keyed("b", key))
	for _, outsider := range []membership.Config{keyed("plain", nil), keyed("other", bytes.Repeat([]byte{8}, 32))} {
		n, err := membership.Start(outsider)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Shutdown() })
		if k, err := n.Join([]string{nodes[0].Addr()}); err == nil || k != 0 {
			t.Errorf("%s joined a keyed cluster: %d, %v", outsider.Name, k, err)
		}
	}
	for _, n := range nodes {
		if got := membershiptest.Names(n.Members()); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("%s: members %v, want a and b only", n.Name(), got)
		}
	}
	if err := keyed("x", []byte("short")).Validate(); !errors.Is(err, membership.ErrConfig) {
		t.Errorf("a 5-byte key: %v, want ErrConfig", err)
	}
}

// A member whose seed restarts (to the others a dead member that never
// comes back, since memberlist does not rejoin) joins it again with
// KeepJoined: without it, members that joined through a grantor that was
// the only one went on without it for good after it restarted, and their
// deaths reached no grantor (found by an outside client).
func TestKeepJoinedRejoinsARestartedSeed(t *testing.T) {
	nodes := membershiptest.Cluster(t, "seed", "member")
	seedAddr := nodes[0].Addr()
	_, port, _ := net.SplitHostPort(seedAddr)
	nodes[1].KeepJoined([]string{seedAddr}, 100*time.Millisecond)
	if err := nodes[0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	membershiptest.WaitFor(t, nodes[1], wait, membershiptest.Is(membership.EventDead, "seed"))
	cfg := membership.TestConfig("seed")
	cfg.BindAddr, cfg.BindPort = "127.0.0.1", mustAtoi(t, port)
	again, err := membership.Start(cfg) // the same name and address, joining no one
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Shutdown() })
	membershiptest.WaitFor(t, again, wait, membershiptest.Is(membership.EventJoin, "member"))
}

// A seed that restarts on its address before its members declare it dead
// (a lone grantor under a supervisor) knows none of them, and to them it
// never left: it answers their probes. But its heartbeats stopped, so it
// turns suspect, and KeepJoined joins it again: it hears of its members
// within seconds, not at memberlist's next push-pull (30 s with the LAN
// profile: an outside client's restarted grantor learnt of its instance
// after 42 s, and gossip removed no registration meanwhile).
func TestKeepJoinedRejoinsASeedThatRestartedUnnoticed(t *testing.T) {
	lan := func(name, role, hbRole string) membership.Config {
		c := membership.DefaultConfig(name)
		c.BindPort = 0
		c.Meta, c.HeartbeatRole = map[string]string{"role": role}, hbRole
		return c
	}
	nodes := membershiptest.Start(t, lan("seed", "grantor", ""), lan("member", "instance", "grantor"))
	seedAddr := nodes[0].Addr()
	_, port, _ := net.SplitHostPort(seedAddr)
	nodes[1].KeepJoined([]string{seedAddr}, 100*time.Millisecond)
	if err := nodes[0].Shutdown(); err != nil {
		t.Fatal(err)
	}
	cfg := lan("seed", "grantor", "")
	cfg.BindPort = mustAtoi(t, port)
	again, err := membership.Start(cfg) // the same name and address, at once, joining no one
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Shutdown() })
	restarted := time.Now()
	membershiptest.WaitFor(t, again, wait, membershiptest.Is(membership.EventJoin, "member"))
	t.Logf("the restarted seed knew its member after %v", time.Since(restarted).Round(time.Millisecond))
	if m, _ := nodes[1].Member("seed"); m.State.Gone() {
		t.Fatalf("the member took the seed for gone (%+v): it noticed the restart", m)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Members with a HeartbeatRole send heartbeats only to members of that
// role, which judge them as any other; the others do not judge their
// silence. 50 service instances heartbeating each other saturated two
// cores (found by an outside client); their grantors are all that judge
// them.
func TestHeartbeatRole(t *testing.T) {
	cfg := func(name, role, hbRole string) membership.Config {
		c := membership.TestConfig(name)
		c.Meta, c.HeartbeatRole = map[string]string{"role": role}, hbRole
		return c
	}
	nodes := membershiptest.Start(t, cfg("g", "grantor", ""), cfg("i1", "instance", "grantor"), cfg("i2", "instance", "grantor"))
	g, i1, i2 := nodes[0], nodes[1], nodes[2]
	if got := membership.HeartbeatTargets(g); !slices.Equal(got, []string{"i1", "i2"}) {
		t.Errorf("g heartbeats %v; want every member", got)
	}
	if got := membership.HeartbeatTargets(i1); !slices.Equal(got, []string{"g"}) {
		t.Errorf("i1 heartbeats %v; want the grantor only", got)
	}
	if m, _ := g.Member("i1"); len(m.Meta) != 1 || m.Meta["role"] != "instance" {
		t.Errorf("g sees i1's meta %v; want its own keys only", m.Meta)
	}

	paused := time.Now()
	membership.PauseHeartbeats(i1, true)
	e, _ := membershiptest.WaitFor(t, g, wait, func(e membership.Event) bool {
		return e.Type == membership.EventSuspect && e.Member.Name == "i1" && !e.Time.Before(paused)
	})
	t.Logf("g: i1 suspect %v after its heartbeats stopped", e.Time.Sub(paused).Round(time.Millisecond))
	if m, _ := i2.Member("i1"); m.Suspicion != 0 || m.State != membership.StateAlive {
		t.Errorf("i2, which i1 sends no heartbeats, judges it: %+v", m)
	}
}

// A node started again under its name on another address, once its old
// self is dead (a supervisor's restart of `leased register --node NAME`,
// whose gossip port is a free one), is that member again at once, with
// the LAN profile too: memberlist kept the dead member's address and
// ignored the new one as a conflict until it forgot the dead one, and the
// restarted instance was listed dead, suspicion 1000000, for 50 s (found
// by an outside client).
func TestRestartOnAnotherAddressReclaimsADeadName(t *testing.T) {
	lan := func(name string) membership.Config {
		cfg := membership.DefaultConfig(name)
		cfg.BindPort = 0
		return cfg
	}
	nodes := membershiptest.Start(t, lan("a"), lan("b"))
	oldAddr := nodes[1].Addr()
	if err := nodes[1].Shutdown(); err != nil { // no Leave: to a it just stops answering
		t.Fatal(err)
	}
	dead, _ := membershiptest.WaitFor(t, nodes[0], 30*time.Second, membershiptest.Is(membership.EventDead, "b"))
	// A name is reclaimed once its member has been dead for a second.
	time.Sleep(time.Until(dead.Time.Add(1100 * time.Millisecond)))
	again, err := membership.Start(lan("b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = again.Shutdown() })
	if again.Addr() == oldAddr {
		t.Fatalf("restarted on the old address %s", oldAddr)
	}
	if _, err := again.Join([]string{nodes[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	membershiptest.WaitFor(t, nodes[0], 5*time.Second, membershiptest.Is(membership.EventJoin, "b"))
	if m, _ := nodes[0].Member("b"); m.State.Gone() || m.Addr != again.Addr() {
		t.Errorf("b after its restart: %+v, want alive at %s", m, again.Addr())
	}
}

// SuspicionTimeout is memberlist's longest suspicion timeout plus a probe
// interval, by profile: what the registry waits after a stall before it
// trusts a dead verdict.
func TestSuspicionTimeout(t *testing.T) {
	for _, tc := range []struct {
		p    membership.Profile
		want time.Duration
	}{
		{membership.ProfileFast, 2500*time.Millisecond + 250*time.Millisecond},
		{membership.ProfileTest, 3*8*100*time.Millisecond + 100*time.Millisecond},
		{membership.ProfileLAN, 6*4*time.Second + time.Second},
	} {
		cfg := membership.ProfileConfig("n-"+tc.p.String(), tc.p)
		cfg.BindPort = 0
		n := membershiptest.Start(t, cfg)[0]
		if got := n.SuspicionTimeout(); got != tc.want {
			t.Errorf("%v: SuspicionTimeout() = %v, want %v", tc.p, got, tc.want)
		}
	}
}
