package grantor_test

import (
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/membership/membershiptest"
)

// The registry follows registrations (no polling), reports suspicion from
// gossip, and removes a dead node's registrations with cause "gossip",
// leaving every other lease alone.
func TestRegistryGossipRemovesDeadNodesRegistrations(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-1")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	reg, err := grantor.NewRegistry(ctx, st, nodes[0], 8, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	changes := reg.Watch(ctx, "web")

	k, err := grantor.Register(ctx, st, grantor.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:8080",
		Node: "web-1", Meta: map[string]string{"zone": "a"}}, "web-1", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	// An exclusive lease of the same node: gossip must never end it.
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "jobs.nightly", Holder: "web-1", Duration: 30 * time.Second,
		Attributes: map[string]string{"node": "web-1"}}); err != nil {
		t.Fatal(err)
	}

	if c := nextChange(t, changes, "added"); c.Instance.Instance != "i1" || c.Instance.Meta["zone"] != "a" {
		t.Fatalf("added: %+v", c)
	}
	got := reg.Discover("web", 0)
	if len(got) != 1 || !got[0].Gossip || got[0].Suspect || got[0].Addr != "127.0.0.1:8080" || got[0].Node != "web-1" {
		t.Fatalf("discover: %+v", got)
	}

	died := time.Now()
	if err := nodes[1].Shutdown(); err != nil { // no Leave: to the others it just stops answering
		t.Fatal(err)
	}
	c := nextChange(t, changes, "removed")
	if c.Cause != grantor.CauseGossip || c.Instance.Instance != "i1" {
		t.Fatalf("removed: %+v, want cause gossip", c)
	}
	t.Logf("removed %v after its node stopped", time.Since(died).Round(time.Millisecond))
	if got := reg.Discover("web", 0); len(got) != 0 {
		t.Fatalf("discover after removal: %+v", got)
	}
	if _, err := st.Get(ctx, "jobs.nightly"); err != nil {
		t.Fatalf("the node's exclusive lease: %v (gossip must not end it)", err)
	}
	select {
	case <-k.Done():
		if err := k.Err(); err == nil {
			t.Fatal("keeper done without a reason")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the instance's keeper did not notice its registration was removed")
	}
}

func nextChange(t *testing.T, ch <-chan grantor.Change, typ string) grantor.Change {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if c.Type == typ {
				return c
			}
		case <-timeout:
			t.Fatalf("no %q change", typ)
		}
	}
}

func TestRegistrationValidate(t *testing.T) {
	for _, r := range []grantor.Registration{
		{Service: "", Instance: "i", Addr: "a:1"},
		{Service: "web.x", Instance: "i", Addr: "a:1"},
		{Service: "web", Instance: "i.2", Addr: "a:1"},
		{Service: "web", Instance: "i 2", Addr: "a:1"},
		{Service: "web", Instance: "i", Addr: ""},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: accepted", r)
		}
	}
	if err := (grantor.Registration{Service: "web", Instance: "i-1", Addr: "a:1"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
