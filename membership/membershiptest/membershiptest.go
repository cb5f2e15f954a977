package membershiptest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/membership"
)

// Timeout bounds every wait in this package: convergence normally takes a
// few hundred milliseconds.
const Timeout = 10 * time.Second

// Cluster starts one node per name with [membership.TestConfig], joins them
// all through the first, and returns once every node has received
// [membership.EventJoin] for every other one and a heartbeat from it (see
// [WaitHeard]). Those Join events are consumed; later events are left for
// the caller. The nodes are shut down by t.Cleanup.
func Cluster(t testing.TB, names ...string) []*membership.Node {
	t.Helper()
	cfgs := make([]membership.Config, len(names))
	for i, name := range names {
		cfgs[i] = membership.TestConfig(name)
	}
	return Start(t, cfgs...)
}

// ClusterLAN is [Cluster] with [membership.ProfileLAN] on free ports:
// memberlist's own timing (500 ms probe timeout, at least 4 s of suspicion,
// Lifeguard), so a killed node is declared dead after about 5 s, and
// later under load; wait for that with a bound of your own ([WaitFor]),
// not [Timeout]. For tests whose point is that one node and no other is
// declared dead: on a machine at load 15 the test profile's 50 ms probe
// timeout and 0.8 s suspicion declared a live node dead.
func ClusterLAN(t testing.TB, names ...string) []*membership.Node {
	t.Helper()
	cfgs := make([]membership.Config, len(names))
	for i, name := range names {
		cfgs[i] = membership.DefaultConfig(name)
		cfgs[i].BindPort = 0
	}
	return Start(t, cfgs...)
}

// Start is [Cluster] with explicit configurations, which should have
// distinct names and free ports (BindPort 0), and use ProfileTest unless
// the test waits longer than [Timeout] for a verdict.
func Start(t testing.TB, cfgs ...membership.Config) []*membership.Node {
	t.Helper()
	nodes := make([]*membership.Node, len(cfgs))
	for i, cfg := range cfgs {
		n, err := membership.Start(cfg)
		if err != nil {
			t.Fatalf("membershiptest: start %s: %v", cfg.Name, err)
		}
		t.Cleanup(func() { _ = n.Shutdown() })
		nodes[i] = n
	}
	for _, n := range nodes[1:] {
		if _, err := n.Join([]string{nodes[0].Addr()}); err != nil {
			t.Fatalf("membershiptest: %s joins %s: %v", n.Name(), nodes[0].Addr(), err)
		}
	}
	for _, n := range nodes {
		WaitJoined(t, n, nodes...)
	}
	for i, n := range nodes {
		for j, o := range nodes {
			// o heartbeats n unless its HeartbeatRole is not n's role.
			if o != n && (cfgs[j].HeartbeatRole == "" || cfgs[i].Meta["role"] == cfgs[j].HeartbeatRole) {
				WaitHeard(t, n, o.Name())
			}
		}
	}
	return nodes
}

// WaitHeard waits until n receives a heartbeat from the named member (its
// [membership.Member.LastHeard] advances), failing t after [Timeout]. Until
// a member's first heartbeat after joining, the detector is lenient (about
// 12 heartbeat intervals of silence before suspicion); after it, a silent
// member is suspect after about 0.4 s with the test profile.
func WaitHeard(t testing.TB, n *membership.Node, name string) {
	t.Helper()
	m, ok := n.Member(name)
	if !ok {
		t.Fatalf("membershiptest: %s does not know %s", n.Name(), name)
	}
	deadline := time.Now().Add(Timeout)
	for {
		if now, ok := n.Member(name); ok && now.LastHeard.After(m.LastHeard) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("membershiptest: %s heard no heartbeat from %s within %v", n.Name(), name, Timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition
	}
}

// WaitJoined reads n's events until it has seen [membership.EventJoin] for
// every node in others except itself, failing t after [Timeout].
func WaitJoined(t testing.TB, n *membership.Node, others ...*membership.Node) {
	t.Helper()
	missing := map[string]bool{}
	for _, o := range others {
		if o.Name() != n.Name() {
			missing[o.Name()] = true
		}
	}
	for len(missing) > 0 {
		e, _ := WaitFor(t, n, Timeout, func(e membership.Event) bool {
			return e.Type == membership.EventJoin && missing[e.Member.Name]
		})
		delete(missing, e.Member.Name)
	}
}

// WaitFor reads n's events until match returns true, and returns that event
// and those read before it. It fails t if timeout passes first or the
// channel is closed.
func WaitFor(t testing.TB, n *membership.Node, timeout time.Duration, match func(membership.Event) bool) (membership.Event, []membership.Event) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var skipped []membership.Event
	for {
		select {
		case e, ok := <-n.Events():
			if !ok {
				t.Fatalf("membershiptest: %s: events closed; skipped %s", n.Name(), Describe(skipped))
			}
			if match(e) {
				return e, skipped
			}
			skipped = append(skipped, e)
		case <-timer.C:
			t.Fatalf("membershiptest: %s: no matching event within %v; skipped %s", n.Name(), timeout, Describe(skipped))
		}
	}
}

// Is returns a matcher for WaitFor: an event of type typ about the named
// member.
func Is(typ membership.EventType, name string) func(membership.Event) bool {
	return func(e membership.Event) bool { return e.Type == typ && e.Member.Name == name }
}

// Describe renders events for failure messages: "[join b, suspect c]".
func Describe(evs []membership.Event) string {
	s := make([]string, len(evs))
	for i, e := range evs {
		s[i] = fmt.Sprintf("%v %s", e.Type, e.Member.Name)
	}
	return fmt.Sprint(s)
}

// Names returns the names of members, in order.
func Names(ms []membership.Member) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return slices.Clip(names)
}
