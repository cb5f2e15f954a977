package registry

import (
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Gossip's verdict on a node ends the tenures the registry saw on it, not
// whatever holds their names at the bucket: an instance that moved (its
// registration released on the dead node and made again from another) is
// left alone, even when the verdict reaches a registry whose watch has not
// yet delivered the move (its link slow, or its node paused). It was
// revoked by name, at once (found in review).
func TestRemoveNodeEndsOnlyTheTenuresItSaw(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	r, err := New(kvleasetest.OpenStore(t, proxy.URL(), kvlease.WithoutCreate()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	changes := r.Watch(ctx, "web")
	grant := func(node string) kvlease.Record {
		t.Helper()
		reg := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:1", Node: node}
		rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: node, Duration: time.Minute,
			Attributes: reg.Attributes()})
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	old := grant("web-9")
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("the registration never reached the registry")
	}

	// The registry's news now comes 1 s late (its answers too, which its
	// revocation's attempts, 2 s each, allow).
	proxy.DelayReplies(time.Second)
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: old.Name, Holder: old.Holder, Token: old.Token,
		Revision: old.Revision}); err != nil {
		t.Fatal(err)
	}
	moved := grant("web-2")
	r.mu.Lock()
	seen := r.instances["web"]["i1"].Token
	r.mu.Unlock()
	if seen != old.Token {
		t.Fatalf("the registry already holds token %d, want the old %d: its watch was not behind", seen, old.Token)
	}
	r.removeNode("web-9", reasonDead, time.Now())

	if cur, err := st.Get(ctx, moved.Name); err != nil || cur.Token != moved.Token {
		t.Fatalf("the registration made from web-2 after web-9's ended: %+v, %v; want it kept (token %d)", cur, err, moved.Token)
	}
}
