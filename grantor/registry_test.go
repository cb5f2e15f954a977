package grantor_test

import (
	"encoding/json"
	"errors"
	"fmt"
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

	if c := nextChange(t, changes, grantor.ChangeAdded); c.Instance.Instance != "i1" || c.Instance.Meta["zone"] != "a" {
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
	c := nextChange(t, changes, grantor.ChangeRemoved)
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

// svc.v1.register, .discover and .deregister from any NATS client.
func TestServiceRegistrationAPI(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	req := func(subject, body string) []byte {
		t.Helper()
		reply, err := f.nc.Request(subject, []byte(body), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
			t.Fatalf("%s %s: %s %s", subject, body, code, reply.Data)
		}
		return reply.Data
	}
	var lease grantor.Lease
	mustJSON(t, req(grantor.SubjectRegister, `{"service":"api","instance":"a1","addr":"10.0.0.1:80","holder":"a1","ttl":"10s","meta":{"v":"2"}}`), &lease)
	if lease.Name != "svc.api.a1" || lease.Secret == "" {
		t.Fatalf("register reply %+v", lease)
	}
	// The registry follows the bucket's stream, so discovery shows the
	// registration once the stream has delivered it: ask until it does.
	var rep grantor.DiscoverReply
	for deadline := time.Now().Add(5 * time.Second); len(rep.Instances) == 0 && time.Now().Before(deadline); {
		mustJSON(t, req(grantor.SubjectDiscover, `{"service":"api"}`), &rep)
	}
	if len(rep.Instances) != 1 || rep.Instances[0].Addr != "10.0.0.1:80" || rep.Instances[0].Meta["v"] != "2" || rep.Instances[0].Gossip {
		t.Fatalf("discover %+v", rep)
	}
	bad, err := f.nc.Request(grantor.SubjectRegister, []byte(`{"service":"a.b","instance":"x","addr":"h:1","holder":"h"}`), 5*time.Second)
	if err != nil || bad.Header.Get("Nats-Service-Error-Code") != grantor.CodeInvalidArgument {
		t.Fatalf("register with a dotted service: %v %v", bad, err)
	}
	req(grantor.SubjectDeregister, fmt.Sprintf(`{"service":"api","instance":"a1","holder":"a1","token":%d,"revision":%d,"secret":%q}`,
		lease.Token, lease.Revision, lease.Secret))
	if _, err := f.store.Get(t.Context(), "svc.api.a1"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatalf("after deregister: %v", err)
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}
