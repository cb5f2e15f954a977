package registry_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/membership"
	"github.com/leased/leased/membership/membershiptest"
)

// A grantor cut off from gossip (its gossip port firewalled, its network
// to the instances broken) while it still reaches NATS sees every other
// member die one after another; it revoked every registration in the
// bucket, and every `leased register` exited 5. When most other members
// are dead or suspect at once, the registry now leaves registrations to
// their TTL and says why. Here the instances really died, all at once:
// their registrations end by TTL, not by gossip.
func TestRegistryLeavesRegistrationsToTheirTTLWhenMostNodesGoAtOnce(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-1", "web-2", "web-3")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	warnings := make(chan slog.Record, 16)
	reg := startRegistry(t, st, registry.WithGossip(nodes[0], 8), registry.WithLogger(slog.New(kvleasetest.Warnings(warnings))))
	changes := reg.Watch(ctx, "web")
	const ttl = 6 * time.Second // gossip's verdicts (test profile) come 1–2 s after the nodes stop
	var expiry time.Time
	for _, n := range nodes[1:] {
		r := api.Registration{Service: "web", Instance: n.Name(), Addr: "127.0.0.1:8080", Node: n.Name()}
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: r.LeaseName(), Holder: n.Name(), Duration: ttl, Attributes: r.Attributes()})
		if err != nil {
			t.Fatal(err)
		}
		nextChange(t, changes, registry.ChangeAdded)
		expiry = rec.ExpiresAt() // the last
		membershiptest.WaitHeard(t, nodes[0], n.Name())
	}
	for _, n := range nodes[1:] {
		if err := n.Shutdown(); err != nil { // no Leave: to the grantor they just stop answering
			t.Fatal(err)
		}
	}
	waitAllDead(t, nodes[0], "web-1", "web-2", "web-3")
	if left := time.Until(expiry); left < time.Second {
		t.Fatalf("gossip's verdicts came %v before the registrations' TTL: too late to tell a hold from a lapse", left)
	}
	select {
	case w := <-warnings:
		if !strings.Contains(w.Message, "this grantor is likely cut off") {
			t.Fatalf("warning %q", w.Message)
		}
	case c := <-changes:
		t.Fatalf("%+v before any warning, gossip's verdicts in", c)
	case <-time.After(10 * time.Second):
		t.Fatal("no warning that removals are held back")
	}
	for range 3 {
		c := nextChange(t, changes, registry.ChangeRemoved)
		if c.Cause != registry.CauseTTL {
			t.Fatalf("removed: %+v, want cause %q (left to its TTL), not %q", c, registry.CauseTTL, c.Cause)
		}
	}
	t.Logf("all ended by TTL, the last %v after its expiry", time.Since(expiry).Round(time.Millisecond))
}

// One instance of three dies: gossip removes its registration at once, as
// before; the others stay. With memberlist's own timing (ClusterLAN): the
// test profile's 50 ms probe timeout and 0.8 s suspicion declared a live
// node dead at load 15 and more, and its registration was removed first:
// 4 of 40 runs with 8 busy loops on 2 cores (load 15–22, -race), against
// none of 25 runs of this version beside them.
func TestRegistryRemovesOneDeadNodeOfThree(t *testing.T) {
	nodes := membershiptest.ClusterLAN(t, "grantor", "web-1", "web-2", "web-3")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	reg := startRegistry(t, st, registry.WithGossip(nodes[0], 8))
	changes := reg.Watch(ctx, "web")
	for _, n := range nodes[1:] {
		r := api.Registration{Service: "web", Instance: n.Name(), Addr: "127.0.0.1:8080", Node: n.Name()}
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: r.LeaseName(), Holder: n.Name(), Duration: time.Minute,
			Attributes: r.Attributes()}); err != nil {
			t.Fatal(err)
		}
		nextChange(t, changes, registry.ChangeAdded)
	}
	if err := nodes[1].Shutdown(); err != nil {
		t.Fatal(err)
	}
	// About 5 s on a quiet machine (LAN profile), more under load.
	c := nextChangeWithin(t, changes, registry.ChangeRemoved, 60*time.Second)
	if c.Cause != registry.CauseGossip || c.Instance.Instance != "web-1" {
		t.Fatalf("removed: %+v, want web-1 with cause gossip", c)
	}
	if got := reg.Discover(ctx, "web", 0); len(got) != 2 {
		t.Fatalf("discover: %+v, want web-2 and web-3", got)
	}
}

// waitAllDead polls n's member list until every named member is dead:
// the registry reads n's events.
func waitAllDead(t *testing.T, n *membership.Node, names ...string) {
	t.Helper()
	deadline := time.Now().Add(membershiptest.Timeout)
	for {
		dead := 0
		for _, name := range names {
			if m, ok := n.Member(name); ok && m.State == membership.StateDead {
				dead++
			}
		}
		if dead == len(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %v dead to %s after %v", dead, names, n.Name(), membershiptest.Timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
}
