package registry_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/membership"
	"github.com/leased/leased/membership/membershiptest"
)

// The registry follows registrations (no polling), reports suspicion from
// gossip, and removes a dead node's registrations with cause "gossip",
// leaving every other lease alone.
func TestRegistryGossipRemovesDeadNodesRegistrations(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-1")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	reg := startRegistry(t, st, registry.WithGossip(nodes[0], 8))
	changes := reg.Watch(ctx, "web")

	k, err := client.Register(ctx, st, api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:8080",
		Node: "web-1", Meta: map[string]string{"zone": "a"}}, "web-1", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Orphan()
	// An exclusive lease of the same node: gossip must never end it.
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: "jobs.nightly", Holder: "web-1", Duration: 30 * time.Second,
		Attributes: map[string]string{"node": "web-1"}}); err != nil {
		t.Fatal(err)
	}

	if c := nextChange(t, changes, registry.ChangeAdded); c.Instance.Instance != "i1" || c.Instance.Meta["zone"] != "a" {
		t.Fatalf("added: %+v", c)
	}
	got := reg.Discover(ctx, "web", 0)
	if len(got) != 1 || !got[0].Gossip || got[0].Suspect || got[0].Addr != "127.0.0.1:8080" || got[0].Node != "web-1" {
		t.Fatalf("discover: %+v", got)
	}

	died := time.Now()
	if err := nodes[1].Shutdown(); err != nil { // no Leave: to the others it just stops answering
		t.Fatal(err)
	}
	c := nextChange(t, changes, registry.ChangeRemoved)
	if c.Cause != registry.CauseGossip || c.Instance.Instance != "i1" {
		t.Fatalf("removed: %+v, want cause gossip", c)
	}
	t.Logf("removed %v after its node stopped", time.Since(died).Round(time.Millisecond))
	if got := reg.Discover(ctx, "web", 0); len(got) != 0 {
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

func nextChange(t *testing.T, ch <-chan registry.Change, typ string) registry.Change {
	t.Helper()
	return nextChangeWithin(t, ch, typ, 10*time.Second)
}

// nextChangeWithin is nextChange waiting up to d.
func nextChangeWithin(t *testing.T, ch <-chan registry.Change, typ string, d time.Duration) registry.Change {
	t.Helper()
	timeout := time.After(d)
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

// serve runs a grantor with the registry as its extension, and returns
// its store and a client connection.
func serve(t *testing.T) (*kvlease.Store, *nats.Conn) {
	t.Helper()
	srv := kvleasetest.NewServer(t)
	cfg := grantor.DefaultConfig()
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st, err := kvlease.Open(t.Context(), kvleasetest.JetStream(t, nc))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.New(st)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := grantor.New(st, nc, cfg, grantor.WithExtension(reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	if err := reg.Start(t.Context()); !errors.Is(err, registry.ErrStarted) {
		t.Fatalf("a second Start: %v, want ErrStarted", err)
	}
	return st, kvleasetest.Connect(t, srv.ClientURL())
}

// svc.v1.register, .discover and .deregister from any NATS client.
func TestServiceRegistrationAPI(t *testing.T) {
	store, nc := serve(t)
	req := func(subject, body string) []byte {
		t.Helper()
		reply, err := nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("%s %s: %s %s", subject, body, code, reply.Data)
		}
		return reply.Data
	}
	// A plain grant under svc. is no registration: it was discovered as
	// an instance with no address (found by an outside client).
	if _, err := store.Grant(t.Context(), kvlease.GrantRequest{Name: "svc.api.fake", Holder: "me", Duration: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	var lease api.Lease
	mustJSON(t, req(api.SubjectRegister, `{"service":"api","instance":"a1","addr":"10.0.0.1:80","holder":"a1","ttl":"10s","meta":{"v":"2"}}`), &lease)
	if lease.Name != "svc.api.a1" || lease.Secret == "" {
		t.Fatalf("register reply %+v", lease)
	}
	// The registry follows the bucket's stream, so discovery shows the
	// registration once the stream has delivered it: ask until it does.
	var rep api.DiscoverReply
	for deadline := time.Now().Add(5 * time.Second); len(rep.Instances) == 0 && time.Now().Before(deadline); {
		mustJSON(t, req(api.SubjectDiscover, `{"service":"api"}`), &rep)
	}
	if len(rep.Instances) != 1 || rep.Instances[0].Addr != "10.0.0.1:80" || rep.Instances[0].Meta["v"] != "2" || rep.Instances[0].Gossip {
		t.Fatalf("discover %+v", rep)
	}
	// A registration retried with its request_id and secret (its reply
	// lost) gets the registration it made.
	const retried = `{"service":"api","instance":"a2","addr":"10.0.0.2:80","holder":"a2","ttl":"10s","request_id":"r-a2","secret":"a2-secret-0123456789"}`
	var first, again api.Lease
	mustJSON(t, req(api.SubjectRegister, retried), &first)
	mustJSON(t, req(api.SubjectRegister, retried), &again)
	if again.Token != first.Token || !again.Recovered || first.Secret != "a2-secret-0123456789" {
		t.Fatalf("retried register: %+v after %+v; want the same tenure, recovered, with the caller's secret", again, first)
	}
	bad, err := nc.Request(api.SubjectRegister, []byte(`{"service":"a.b","instance":"x","addr":"h:1","holder":"h"}`), 5*time.Second)
	if err != nil || bad.Header.Get("Nats-Service-Error-Code") != api.CodeInvalidArgument {
		t.Fatalf("register with a dotted service: %v %v", bad, err)
	}
	req(api.SubjectDeregister, fmt.Sprintf(`{"service":"api","instance":"a1","holder":"a1","token":%d,"revision":%d,"secret":%q}`,
		lease.Token, lease.Revision, lease.Secret))
	if _, err := store.Get(t.Context(), "svc.api.a1"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("after deregister: %v", err)
	}
}

// A plain grant under svc. is no registration, neither as it begins nor
// as it ends: Watch told of its release as a removed instance (with no
// address) it had never told was added (found by an outside client).
func TestWatchLeavesOutTheEndOfAPlainGrant(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	reg, err := registry.New(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	changes := reg.Watch(t.Context(), "web")
	rec, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: "svc.web.plain", Holder: "me", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Release(t.Context(), kvlease.ReleaseRequest{Name: rec.Name, Holder: "me", Token: rec.Token, Revision: rec.Revision,
		Secret: rec.Secret}); err != nil {
		t.Fatal(err)
	}
	inst := api.Registration{Service: "web", Instance: "real", Addr: "10.0.0.1:80"}
	if _, err := st.Grant(t.Context(), kvlease.GrantRequest{Name: inst.LeaseName(), Holder: "me", Duration: 10 * time.Second,
		Attributes: inst.Attributes()}); err != nil {
		t.Fatal(err)
	}
	// The bucket's changes come in order: the registration's after the
	// plain grant's end.
	select {
	case c := <-changes:
		if c.Type != registry.ChangeAdded || c.Instance.Instance != "real" {
			t.Fatalf("first change %s of %q (addr %q, cause %q), want the registration added", c.Type, c.Instance.Instance, c.Instance.Addr, c.Cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change within 10 s of the registration")
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// A registration's TTL is a grant's: an explicit zero is out of range.
func TestBadRegistrationRequests(t *testing.T) {
	_, nc := serve(t)
	meta := `"k0":"v"`
	for i := 1; i < 16; i++ {
		meta += fmt.Sprintf(`,"k%d":"v"`, i)
	}
	for _, tc := range []struct {
		name, subject, body, code string
		says                      string // in the message
	}{
		{"explicit zero ttl on register", api.SubjectRegister, `{"service":"s","instance":"i","addr":"127.0.0.1:1","holder":"h","ttl":"0s"}`, api.CodeTTLOutOfRange, ""},
		{"unknown svc verb", "svc.v1.frobnicate", `{}`, api.CodeInvalidArgument, ""},
		// "17 attributes, limit 16" answered 16 metadata keys (found by an
		// outside client).
		{"16 metadata keys", api.SubjectRegister, `{"service":"s","instance":"i","addr":"127.0.0.1:1","holder":"h","meta":{` + meta + `}}`,
			api.CodeTooLarge, "meta.KEY for each metadata key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reply, err := nc.Request(tc.subject, []byte(tc.body), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if code := reply.Header.Get(api.HeaderErrorCode); code != tc.code || !strings.Contains(reply.Header.Get(api.HeaderError), tc.says) {
				t.Fatalf("code %q (%s), want %q saying %q", code, reply.Data, tc.code, tc.says)
			}
		})
	}
}

// Options refuse values they cannot use, and a registry starts once.
func TestOptionsRefuseBadValues(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	nodes := membershiptest.Cluster(t, "grantor")
	for name, opt := range map[string]registry.Option{
		"nil option":     nil,
		"nil gossip":     registry.WithGossip(nil, 8),
		"zero threshold": registry.WithGossip(nodes[0], 0),
		"NaN threshold":  registry.WithGossip(nodes[0], math.NaN()),
		"inf threshold":  registry.WithGossip(nodes[0], math.Inf(1)),
		"nil logger":     registry.WithLogger(nil),
	} {
		t.Run(name, func(t *testing.T) {
			if r, err := registry.New(st, opt); !errors.Is(err, registry.ErrOption) || r != nil {
				t.Fatalf("New = %v, %v; want ErrOption", r, err)
			}
		})
	}
	if _, err := registry.New(nil); !errors.Is(err, registry.ErrOption) {
		t.Fatalf("New(nil) = %v, want ErrOption", err)
	}
	r, err := registry.New(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	if err := r.Start(t.Context()); err == nil {
		t.Fatal("second Start succeeded")
	}
}

// A registry whose watch lags the bucket (its node was paused, or its
// link is slow) does not list a registration past its expiry as an
// instance: the server has lapsed it, and the watch will say so only
// later (an outside client found a resumed grantor node listing lapsed
// instances, suspicion 0, seconds after their expiry). Its view at the
// call is what is filtered: the expiry is confirmed by the server's
// clock, whose answer comes as late as the watch's news.
func TestDiscoverLeavesOutRegistrationsPastTheirExpiry(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	reg, err := registry.New(kvleasetest.OpenStore(t, proxy.URL(), kvlease.WithoutCreate()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	changes := reg.Watch(ctx, "web")
	r := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:1"}
	rec, err := st.Grant(ctx, kvlease.GrantRequest{Name: r.LeaseName(), Holder: "i1", Duration: time.Second, Attributes: r.Attributes()})
	if err != nil {
		t.Fatal(err)
	}
	nextChange(t, changes, registry.ChangeAdded)
	if got := reg.Discover(ctx, "web", 0); len(got) != 1 {
		t.Fatalf("discover while live: %+v", got)
	}
	proxy.DelayReplies(3 * time.Second)                                // the registry's news (and answers) come 3 s late
	time.Sleep(time.Until(rec.ExpiresAt().Add(10 * time.Millisecond))) // a deadline, not a hope: the record's own expiry
	if got := reg.Discover(ctx, "web", 0); len(got) != 0 {
		t.Errorf("discover past the registration's expiry (%v), its watch behind: %+v; want none", rec.ExpiresAt(), got)
	}
}

// A node that leaves gossip gracefully has its registrations removed too
// (reason "node left"): its process deregisters before it leaves, so what
// is left is a deregistration that failed, which was listed, suspect, for
// the rest of its TTL (found by an outside client).
func TestRegistryRemovesRegistrationsOfANodeThatLeft(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-2")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	reg := startRegistry(t, st, registry.WithGossip(nodes[0], 8))
	changes := reg.Watch(ctx, "web")
	r := api.Registration{Service: "web", Instance: "i2", Addr: "127.0.0.1:8080", Node: "web-2"}
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: r.LeaseName(), Holder: "web-2", Duration: time.Minute,
		Attributes: r.Attributes()}); err != nil {
		t.Fatal(err)
	}
	nextChange(t, changes, registry.ChangeAdded)
	if err := nodes[1].Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	c := nextChange(t, changes, registry.ChangeRemoved)
	if c.Cause != registry.CauseGossip || c.Instance.Instance != "i2" {
		t.Fatalf("removed: %+v, want cause gossip", c)
	}
	if _, err := st.Get(ctx, r.LeaseName()); !errors.Is(err, kvlease.ErrNotFound) {
		t.Errorf("the registration after its node left: %v, want ErrNotFound", err)
	}
}

// A node's death whose event the registry never reads (another reader of
// the gossip node's Events took it: a program that logs membership too,
// as the membership package shows; or it came before the registry had
// loaded the registrations) still removes the node's registrations, long
// before their TTL; one granted on that node name after its death (a
// restart with a fixed node name) stays. They were listed until their TTL
// (found by an outside client).
func TestRegistryRemovesRegistrationsOfANodeWhoseDeathItsEventsMissed(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-1")
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	old := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:8080", Node: "web-1"}
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: old.LeaseName(), Holder: "web-1", Duration: time.Minute,
		Attributes: old.Attributes()}); err != nil {
		t.Fatal(err)
	}
	membershiptest.WaitHeard(t, nodes[0], "web-1") // alive after its registration
	died := time.Now()
	if err := nodes[1].Shutdown(); err != nil { // no Leave: to the others it just stops answering
		t.Fatal(err)
	}
	// The program's own reader takes the verdict.
	membershiptest.WaitFor(t, nodes[0], membershiptest.Timeout, membershiptest.Is(membership.EventDead, "web-1"))

	reg, err := registry.New(st, registry.WithGossip(nodes[0], 8))
	if err != nil {
		t.Fatal(err)
	}
	changes := reg.Watch(ctx, "web")
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	if c := nextChange(t, changes, registry.ChangeRemoved); c.Cause != registry.CauseGossip || c.Instance.Instance != "i1" {
		t.Fatalf("removed: %+v, want i1 with cause gossip", c)
	}
	t.Logf("removed %v after its node stopped (TTL 1m)", time.Since(died).Round(time.Millisecond))

	// A new process on the same node name registers before it joins gossip
	// again: its node is still listed dead, but its registration is newer.
	again := api.Registration{Service: "web", Instance: "i2", Addr: "127.0.0.1:8081", Node: "web-1"}
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: again.LeaseName(), Holder: "web-1", Duration: time.Minute,
		Attributes: again.Attributes()}); err != nil {
		t.Fatal(err)
	}
	nextChange(t, changes, registry.ChangeAdded)
	// The registry looks for missed verdicts every second: several looks.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got := reg.Discover(ctx, "web", 0); len(got) != 1 || got[0].Instance != "i2" {
			t.Fatalf("discover: %+v, want i2, registered after its node's death", got)
		}
	}
	if m, ok := nodes[0].Member("web-1"); !ok || !m.State.Gone() {
		t.Fatalf("web-1 is %+v to the grantor, want it still listed gone", m)
	}
}

// Stop returns once nothing of the registry runs: a removal by gossip
// under way (its revocation waiting on a slow link) is abandoned, not left
// running. It went on revoking, for up to 5 s a registration, after Stop
// had returned (found in review).
func TestStopWaitsForRemovalsUnderWay(t *testing.T) {
	nodes := membershiptest.Cluster(t, "grantor", "web-1")
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	ctx := t.Context()
	reg, err := registry.New(kvleasetest.OpenStore(t, proxy.URL(), kvlease.WithoutCreate()), registry.WithGossip(nodes[0], 8))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			reg.Stop()
		}
	}()
	changes := reg.Watch(ctx, "web")
	w, err := st.Watch(ctx, api.RegistrationPrefix)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	r := api.Registration{Service: "web", Instance: "i1", Addr: "127.0.0.1:8080", Node: "web-1"}
	if _, err := st.Grant(ctx, kvlease.GrantRequest{Name: r.LeaseName(), Holder: "web-1", Duration: time.Minute,
		Attributes: r.Attributes()}); err != nil {
		t.Fatal(err)
	}
	nextChange(t, changes, registry.ChangeAdded)

	// The registry's answers now come 1.5 s late: its revocation's read
	// is answered within its first attempt (2 s), whose write lands and
	// whose acknowledgement does not; it reads again.
	proxy.DelayReplies(1500 * time.Millisecond)
	if err := nodes[1].Shutdown(); err != nil {
		t.Fatal(err)
	}
	for revoked := false; !revoked; {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				t.Fatalf("watch ended: %v", w.Err())
			}
			revoked = ev.Name == r.LeaseName() && ev.Type == kvlease.EventRevoked
		case <-time.After(15 * time.Second):
			t.Fatal("the dead node's registration was not revoked")
		}
	}
	reg.Stop() // while the revocation waits for its acknowledgement
	stopped = true
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "registry.(*Registry).reap") {
		t.Fatalf("the registry's reaper runs after Stop returned:\n%s", stacks)
	}
}

// startRegistry starts a registry of st with opts, stopped when t ends.
func startRegistry(t *testing.T, st *kvlease.Store, opts ...registry.Option) *registry.Registry {
	t.Helper()
	reg, err := registry.New(st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	return reg
}
