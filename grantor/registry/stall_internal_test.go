package registry

import (
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/membership"
	"github.com/leased/leased/membership/membershiptest"
)

// A whole host stalled (a VM paused, every process SIGSTOPped together for
// 5 s): each memberlist suspicion under way when it stopped ran out while
// no one could refute it, and the member was declared dead the moment the
// host resumed. The registry removed its registration at once, and the
// instance, alive and answering again within a second, exited 5 (lost):
// from outside, `leased serve` and eight `leased register` with the fast
// profile, one instance stopped 0.7–1.5 s (a suspicion under way, refuted in
// time without the stall), then all of them for 5 s: in 4 of 13 runs. Now
// a verdict that comes within gossip's suspicion timeout of a stall this
// registry saw (its clock, here moved by the test, jumped) waits out that
// timeout: then the member is removed if gossip still says it is dead, and
// kept if it refuted its death. A member that really died is removed
// then, long before its TTL; one that sends this grantor no heartbeats
// too (the sweep bounded its verdict by its join, and kept registrations
// granted after it).
func TestRegistryWaitsOutGossipVerdictsThatComeWithAStall(t *testing.T) {
	// The fast profile, the one it was found with: the test profile's 50 ms
	// probe timeout declared live members dead under load before the stall.
	// The instances heartbeat no one (a role no member has): their silence
	// is not judged, so cutOff, whose count of silent members held such a
	// removal back in some runs and not in others, stays out of it.
	var cfgs []membership.Config
	for _, name := range []string{"grantor", "web-1", "web-2", "web-3", "web-4"} {
		cfg := fastConfig(name)
		if name != "grantor" {
			cfg.HeartbeatRole = "nobody"
		}
		cfgs = append(cfgs, cfg)
	}
	nodes := membershiptest.Start(t, cfgs...)
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	clock := &manualClock{t: time.Now()}
	warnings := make(chan slog.Record, 64)
	r, err := New(st, WithGossip(nodes[0], 8), WithLogger(slog.New(kvleasetest.Warnings(warnings))))
	if err != nil {
		t.Fatal(err)
	}
	r.now = clock.now
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	changes := r.Watch(ctx, "web")
	tokens := map[string]kvlease.Token{}
	for _, n := range nodes[1:] {
		reg := api.Registration{Service: "web", Instance: n.Name(), Addr: "127.0.0.1:8080", Node: n.Name()}
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: n.Name(), Duration: time.Minute, Attributes: reg.Attributes()})
		if err != nil {
			t.Fatal(err)
		}
		tokens[n.Name()] = rec.Token
		waitChange(t, changes, ChangeAdded)
	}

	clock.advance(5 * time.Second) // the stall, as the registry's clock sees it
	// At resume, web-1's suspicion has run out while no one could refute
	// it: a dead verdict on a live member (here forged: one unencrypted
	// UDP packet, as the README warns, with what memberlist would have
	// gossiped); web-2 really stopped.
	forgeDeath(t, nodes[0].Addr(), "web-1", "web-3")
	if err := nodes[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	held := map[string]bool{}
	for len(held) < 2 {
		select {
		case c := <-changes:
			t.Fatalf("%+v: removed on a verdict that came with a stall, before gossip had a suspicion timeout of evidence after it", c)
		case w := <-warnings:
			w.Attrs(func(a slog.Attr) bool {
				if a.Key == "node" && strings.Contains(w.Message, "stall") {
					held[a.Value.String()] = true
				}
				return true
			})
		case <-time.After(membershiptest.Timeout):
			t.Fatalf("verdicts held back for %v, want web-1 and web-2", held)
		}
	}
	t.Logf("both held after %v", time.Since(begin).Round(time.Millisecond))
	waitAlive(t, nodes[0], "web-1") // it refuted its death
	t.Logf("web-1 alive after %v", time.Since(begin).Round(time.Millisecond))

	// Gossip has had its suspicion timeout since the stall.
	passes(t, r, clock, nodes[0].SuspicionTimeout()+stallTick)
	c := waitChange(t, changes, ChangeRemoved)
	t.Logf("web-2 removed after %v", time.Since(begin).Round(time.Millisecond))
	if c.Instance.Instance != "web-2" || c.Cause != CauseGossip {
		t.Fatalf("removed: %+v, want web-2 by gossip", c)
	}
	var got []string
	for _, in := range r.Discover(ctx, "web", 0) {
		if in.Token != uint64(tokens[in.Instance]) {
			t.Errorf("%s: token %d, want %d", in.Instance, in.Token, tokens[in.Instance])
		}
		got = append(got, in.Instance)
	}
	if strings.Join(got, " ") != "web-1 web-3 web-4" {
		t.Fatalf("discover: %v, want web-1 web-3 web-4", got)
	}
}

// forgeDeath sends to the memberlist at addr what a member that judged
// node dead gossips: a dead message (memberlist's deadMsg, msgpack-encoded
// as memberlist encodes it) from another member than node itself, which
// would mean that node left. Its incarnation is above node's, as a
// verdict on node's current incarnation is.
func forgeDeath(t *testing.T, addr, node, from string) {
	t.Helper()
	str := func(b []byte, s string) []byte { return append(append(b, 0xa0|byte(len(s))), s...) }
	msg := []byte{5, 0x83} // deadMsg, a map of 3
	msg = str(msg, "Incarnation")
	msg = append(msg, 0xcd, 0x03, 0xe8) // uint16 1000
	msg = str(str(msg, "Node"), node)
	msg = str(str(msg, "From"), from)
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
}

// fastConfig is the fast profile on a free port of 127.0.0.1.
func fastConfig(name string) membership.Config {
	cfg := membership.ProfileConfig(name, membership.ProfileFast)
	cfg.BindPort = 0
	return cfg
}

// manualClock stands still until the test moves it.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// passes moves clock on by d as time passes, not as a stall: in steps
// shorter than stallGap, each read by r's stall detector before the next.
func passes(t *testing.T, r *Registry, clock *manualClock, d time.Duration) {
	t.Helper()
	for d > 0 {
		step := min(d, stallGap/2)
		clock.advance(step)
		d -= step
		deadline := time.Now().Add(10 * time.Second)
		for {
			r.mu.Lock()
			seen := r.looked.Equal(clock.now())
			r.mu.Unlock()
			if seen {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the stall detector does not read the clock")
			}
			time.Sleep(stallTick / 4) // polling a condition
		}
	}
}

func waitChange(t *testing.T, ch <-chan Change, typ string) Change {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-ch:
			if c.Type == typ {
				return c
			}
		case <-timeout:
			t.Fatalf("no %q change", typ)
		}
	}
}

// waitAlive polls n's member list until name is alive.
func waitAlive(t *testing.T, n *membership.Node, name string) {
	t.Helper()
	deadline := time.Now().Add(membershiptest.Timeout)
	for {
		if m, ok := n.Member(name); ok && m.State == membership.StateAlive {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not alive to %s after %v", name, n.Name(), membershiptest.Timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}
