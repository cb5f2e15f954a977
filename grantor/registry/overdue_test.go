package registry_test

import (
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Tests that SIGKILL a NATS server run it as a child: the test binary in
// kvleasetest.RoleServer.
func TestMain(m *testing.M) {
	kvleasetest.Main(m, map[string]func(string) error{kvleasetest.RoleServer: kvleasetest.ServeChild})
}

// A registration whose expiry the server lost over a SIGKILL and restart
// (nats-server issue 8505) is no instance: discovery leaves it out, as the
// service's lists do, before any observer has ended it (it listed the dead
// instance until then).
func TestDiscoverLeavesOutRegistrationsTheServerKeptPastTheirTTL(t *testing.T) {
	srv := kvleasetest.StartChildServer(t)
	ctx := t.Context()
	st := kvleasetest.OpenStore(t, srv.URL, kvlease.WithMarkerTTL(time.Second), kvlease.WithGrantorMargin(0))
	grant := func(instance string, d time.Duration) {
		t.Helper()
		reg := api.Registration{Service: "web", Instance: instance, Addr: "127.0.0.1:1"}
		if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: instance, Duration: d,
			Attributes: reg.Attributes()}); err != nil {
			t.Fatal(err)
		}
	}
	grant("gone", time.Second)
	grant("live", time.Hour)
	srv.LoseExpiries(st, api.Registration{Service: "web", Instance: "gone"}.LeaseName())

	reg, err := registry.New(kvleasetest.OpenStore(t, srv.URL, kvlease.WithoutCreate()))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	got := reg.Discover(ctx, "web", 0)
	if len(got) != 1 || got[0].Instance != "live" {
		t.Errorf("discover after the restart: %+v; want only the live instance", got)
	}
}
