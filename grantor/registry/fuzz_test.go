package registry_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
)

// recordingLeases is a grantor.Leases that grants and releases anything,
// remembering what it was asked.
type recordingLeases struct {
	grants   []api.GrantRequest
	releases []api.ReleaseRequest
}

func (l *recordingLeases) Grant(_ context.Context, req api.GrantRequest) (api.Lease, error) {
	l.grants = append(l.grants, req)
	return api.Lease{Name: req.Name, Holder: req.Holder, Token: 1, Revision: 1, Attributes: req.Attributes}, nil
}

func (l *recordingLeases) Release(_ context.Context, req api.ReleaseRequest) error {
	l.releases = append(l.releases, req)
	return nil
}

func (l *recordingLeases) MaxPayload() int64 { return 1 << 20 } // NATS's default

// FuzzEndpoints drives the registry's handlers of svc.v1.register,
// deregister and discover, as the service calls them, with any body (a verb
// that is none of the three picks one by its length). A refused request is
// the caller's fault on the wire, never internal; a register grants a valid
// lease name whose record reads back as the registration asked for, with
// the holder and TTL passed through; a deregister releases that name with
// the tenure as given. Seeds: testdata/fuzz/FuzzEndpoints.
func FuzzEndpoints(f *testing.F) {
	f.Add("register", []byte(`{"service":"web","instance":"i1","addr":"10.0.0.7:8080","node":"web-i1","holder":"web-i1","ttl":"30s","meta":{"zone":"a"}}`))
	// The handlers use the leases they are given and the registry's own
	// state, never the store.
	reg, err := registry.New(new(kvlease.Store))
	if err != nil {
		f.Fatal(err)
	}
	verbs := []string{"register", "deregister", "discover"}
	f.Fuzz(func(t *testing.T, verb string, body []byte) {
		if !slices.Contains(verbs, verb) {
			verb = verbs[len(verb)%len(verbs)]
		}
		leases := &recordingLeases{}
		handler := reg.Endpoints(leases)["svc.v1."+verb]
		resp, err := handler(t.Context(), body)
		if err != nil {
			switch code := api.ErrorBodyOf(verb, err).Code; code {
			case api.CodeInvalidArgument, api.CodeTTLOutOfRange, api.CodeTooLarge:
			default:
				t.Fatalf("%s refused with code %q: %v", verb, code, err)
			}
			if len(leases.grants)+len(leases.releases) != 0 {
				t.Fatalf("a refused %s reached the leases: %+v", verb, leases)
			}
			return
		}
		switch verb {
		case "register":
			var req api.RegisterRequest
			if err := api.Decode(body, &req); err != nil {
				t.Fatalf("register accepted a body Decode refuses: %v", err)
			}
			if len(leases.grants) != 1 {
				t.Fatalf("register made %d grants", len(leases.grants))
			}
			g := leases.grants[0]
			if err := kvlease.ValidateName(g.Name); err != nil {
				t.Fatalf("register granted an invalid name: %v", err)
			}
			if g.Holder != req.Holder || !reflect.DeepEqual(g.TTL, req.TTL) {
				t.Fatalf("grant %+v does not carry holder %q and TTL %v", g, req.Holder, req.TTL)
			}
			got, ok := api.RegistrationOf(kvlease.Record{Name: g.Name, Attributes: g.Attributes})
			want := api.Registration{Service: req.Service, Instance: req.Instance, Addr: req.Addr, Node: req.Node, Meta: req.Meta}
			if len(want.Meta) == 0 {
				want.Meta = nil
			}
			if !ok || !reflect.DeepEqual(got, want) {
				t.Fatalf("the granted lease reads back as %+v (%v), want %+v", got, ok, want)
			}
		case "deregister":
			var req api.DeregisterRequest
			if err := api.Decode(body, &req); err != nil {
				t.Fatalf("deregister accepted a body Decode refuses: %v", err)
			}
			want := api.ReleaseRequest{Name: api.RegistrationPrefix + req.Service + "." + req.Instance, Holder: req.Holder,
				Token: req.Token, Revision: req.Revision, Secret: req.Secret}
			if len(leases.releases) != 1 || leases.releases[0] != want {
				t.Fatalf("deregister released %+v, want %+v", leases.releases, want)
			}
			if err := kvlease.ValidateName(want.Name); err != nil {
				t.Fatalf("deregister released an invalid name: %v", err)
			}
		case "discover":
			data, err := json.Marshal(resp)
			var rep api.DiscoverReply
			if err != nil || api.Decode(data, &rep) != nil {
				t.Fatalf("discover replied %T %s (%v), not a DiscoverReply", resp, data, err)
			}
			if len(leases.grants)+len(leases.releases) != 0 {
				t.Fatalf("discover reached the leases: %+v", leases)
			}
		}
	})
}
