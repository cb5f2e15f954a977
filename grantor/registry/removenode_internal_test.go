package registry

import (
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Gossip's verdict on a node removes only the registrations granted before
// it: one granted after is a new process's on a node of the same name (a
// restart with a fixed --node, whose registration can reach the registry
// before the old member's leave or death does).
func TestRemoveNodeKeepsLaterRegistrations(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	r, err := New(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	changes := r.Watch(ctx, "web")
	reg := api.Registration{Service: "web", Instance: "i9", Addr: "127.0.0.1:1", Node: "web-9"}
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: "web-9", Duration: time.Minute,
		Attributes: reg.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(10 * time.Second):
		t.Fatal("the registration never reached the registry")
	}
	r.removeNode("web-9", reasonLeft, rec.GrantedAt.Add(-time.Second)) // the old member left before this grant
	if _, err := st.Get(ctx, reg.LeaseName()); err != nil {
		t.Fatalf("a registration granted after its node's verdict: %v, want it kept", err)
	}
	r.removeNode("web-9", reasonDead, time.Now())
	if _, err := st.Get(ctx, reg.LeaseName()); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("a registration granted before its node's verdict: %v, want it removed", err)
	}
}
