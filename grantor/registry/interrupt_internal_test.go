package registry

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A registry cut off from the server (its connection blackholed: open,
// no bytes) sees no renewal, no end and no new registration, and cannot
// ask the server's clock to confirm an expiry: Discover listed a
// registration that had lapsed for as long as the cut lasted (20 s and
// more), each call waiting 5 s for the server's time, with no sign
// (found by an outside client). While its watch is interrupted, a
// registration past its expiry by this node's clock is left out, and a
// warning says the view is cut off.
func TestDiscoverLeavesOutLapsedRegistrationsWhileCutOff(t *testing.T) {
	st, proxy, r, warnings := cutOffRegistry(t)
	ctx := t.Context()
	changes := r.Watch(ctx, "web")
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:1"}
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: "i1", Duration: 2 * time.Second,
		Attributes: reg.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ChangeAdded)
	proxy.Cut()
	timeout := time.After(10 * time.Second)
wait:
	for {
		select {
		case w := <-warnings:
			if strings.Contains(w.Message, "cut off") {
				break wait
			}
		case <-timeout:
			t.Error("no warning that the registry's watch is cut off") // and the view is looked at anyway
			break wait
		}
	}
	time.Sleep(time.Until(rec.ExpiresAt().Add(10 * time.Millisecond))) // a deadline: the record's own expiry
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if got := r.Discover(dctx, "web", 0); len(got) != 0 {
		t.Errorf("discover past the registration's expiry (%v), cut off (took %v): %+v; want none",
			rec.ExpiresAt(), time.Since(start).Round(time.Millisecond), got)
	}
	proxy.Heal()
	if c := waitChange(t, changes, ChangeRemoved); c.Cause != CauseTTL {
		t.Errorf("removed after the cut healed: %+v, want cause ttl", c)
	}
}

// A registry cut off from the server for longer than the bucket keeps
// a release's tombstone finds the registration gone when its watch is
// back, with no end in the stream to say how it ended: it told its
// watchers the instance was removed with cause "ttl", for an instance
// that had deregistered (found by an outside client, after a 5.5 min
// cut). The cause is "unknown", as the history has it.
func TestRegistryRemovalUnseenWhileCutOffHasCauseUnknown(t *testing.T) {
	st, proxy, r, _ := cutOffRegistry(t, kvlease.WithMarkerTTL(time.Second))
	ctx := t.Context()
	changes := r.Watch(ctx, "web")
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:1"}
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: "i1", Duration: time.Minute,
		Attributes: reg.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ChangeAdded)
	proxy.Cut()
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: rec.Name, Holder: rec.Holder, Token: rec.Token, Revision: rec.Revision}); err != nil {
		t.Fatal(err)
	}
	kvleasetest.WaitEmpty(t, st, rec.Name, 10*time.Second) // the tombstone lapses by its own TTL
	proxy.Heal()
	c := waitChange(t, changes, ChangeRemoved)
	if c.Instance.Instance != "i1" || c.Cause != CauseUnknown {
		t.Errorf("removed after the cut: %+v, want i1 with cause %q", c, CauseUnknown)
	}
}

// A registry cut off from the server while an instance deregistered and
// registered again finds, once its watch is back, the new tenure's
// latest record: a renewal, if the cut outlasted the new tenure's first
// renewal, which replaced the grant that carried the old tenure's end.
// Its watchers were told the instance was added again, and never that
// the tenure they had was removed (found by an outside client: `leased
// register` stopped and started again during a 4 min blackhole of a
// registry's connection; Watch said "added web/i2" and nothing else).
// The tenure seen live is reported removed, with cause "unknown", before
// the new one is reported added.
func TestRegistryTenureReplacedWhileCutOffIsRemovedFirst(t *testing.T) {
	st, proxy, r, _ := cutOffRegistry(t)
	ctx := t.Context()
	changes := r.Watch(ctx, "web")
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:1", Node: "web-i1-1"}
	old, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: "h1", Duration: time.Minute,
		Attributes: reg.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	waitChange(t, changes, ChangeAdded)
	proxy.Cut()
	if err := st.Release(ctx, kvlease.ReleaseRequest{Name: old.Name, Holder: old.Holder, Token: old.Token, Revision: old.Revision}); err != nil {
		t.Fatal(err)
	}
	reg.Node = "web-i1-2"
	cur, err := st.Grant(ctx, kvlease.GrantRequest{Name: reg.LeaseName(), Holder: "h2", Duration: time.Minute,
		Attributes: reg.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, kvlease.RenewRequest{Name: cur.Name, Holder: cur.Holder, Token: cur.Token,
		Revision: cur.Revision, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	proxy.Heal()
	var got []Change
	timeout := time.After(10 * time.Second)
	for len(got) < 2 {
		select {
		case c := <-changes:
			got = append(got, c)
		case <-timeout:
			t.Fatalf("after the cut: %+v; want i1's tenure %d removed, then tenure %d added", got, old.Token, cur.Token)
		}
	}
	if c := got[0]; c.Type != ChangeRemoved || c.Instance.Token != uint64(old.Token) || c.Cause != CauseUnknown {
		t.Errorf("first change after the cut: %+v; want tenure %d removed with cause %q", c, old.Token, CauseUnknown)
	}
	if c := got[1]; c.Type != ChangeAdded || c.Instance.Token != uint64(cur.Token) || c.Instance.Node != "web-i1-2" {
		t.Errorf("second change after the cut: %+v; want tenure %d added, on web-i1-2", c, cur.Token)
	}
	if ins := r.Discover(ctx, "web", 0); len(ins) != 1 || ins[0].Token != uint64(cur.Token) {
		t.Errorf("discover after the cut: %+v; want tenure %d alone", ins, cur.Token)
	}
}

// cutOffRegistry starts a registry whose connection goes through a proxy
// the test can cut, and a Store of its own on the server directly, made
// with storeOpts; the registry's warnings go to the channel.
func cutOffRegistry(t *testing.T, storeOpts ...kvlease.Option) (*kvlease.Store, *kvleasetest.Proxy, *Registry, chan slog.Record) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), storeOpts...)
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	warnings := make(chan slog.Record, 16)
	r, err := New(kvleasetest.OpenStore(t, proxy.URL(), kvlease.WithoutCreate()),
		WithLogger(slog.New(kvleasetest.Warnings(warnings))))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return st, proxy, r, warnings
}
