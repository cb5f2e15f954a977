package api_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// requestKinds are the request bodies of every endpoint, by verb, each with
// the checks its handler runs after decoding (the lease verbs' name and
// holder checks are the store's; the registry's are Registration.Validate).
var requestKinds = []struct {
	verb  string
	new   func() any
	check func(t *testing.T, req any)
}{
	{"grant", func() any { return new(api.GrantRequest) }, func(t *testing.T, r any) {
		req := r.(*api.GrantRequest)
		checkName(t, req.Name)
		checkHolder(t, req.Holder)
	}},
	{"renew", func() any { return new(api.RenewRequest) }, func(t *testing.T, r any) {
		req := r.(*api.RenewRequest)
		checkName(t, req.Name)
		checkHolder(t, req.Holder)
	}},
	{"release", func() any { return new(api.ReleaseRequest) }, func(t *testing.T, r any) {
		req := r.(*api.ReleaseRequest)
		checkName(t, req.Name)
		checkHolder(t, req.Holder)
	}},
	{"get", func() any { return new(api.GetRequest) }, func(t *testing.T, r any) { checkName(t, r.(*api.GetRequest).Name) }},
	{"list", func() any { return new(api.ListRequest) }, func(t *testing.T, r any) {}},
	{"revoke", func() any { return new(api.RevokeRequest) }, func(t *testing.T, r any) { checkName(t, r.(*api.RevokeRequest).Name) }},
	{"register", func() any { return new(api.RegisterRequest) }, func(t *testing.T, r any) {
		req := r.(*api.RegisterRequest)
		checkRegistration(t, api.Registration{Service: req.Service, Instance: req.Instance, Addr: req.Addr, Node: req.Node, Meta: req.Meta})
	}},
	{"deregister", func() any { return new(api.DeregisterRequest) }, func(t *testing.T, r any) {
		req := r.(*api.DeregisterRequest)
		checkRegistration(t, api.Registration{Service: req.Service, Instance: req.Instance, Addr: "a:1"})
	}},
	{"discover", func() any { return new(api.DiscoverRequest) }, func(t *testing.T, r any) {
		checkRegistration(t, api.Registration{Service: r.(*api.DiscoverRequest).Service, Instance: "x", Addr: "a:1"})
	}},
}

// FuzzDecodeRequest decodes a body as the request of a verb (a verb that is
// none of the API's picks one by its length) the way the service does, and
// checks that a decoded request survives encoding and decoding unchanged,
// and that whatever passes the handler's checks is what the store and the
// registry rely on. Seeds: testdata/fuzz/FuzzDecodeRequest (docs/api.md's
// examples among them).
func FuzzDecodeRequest(f *testing.F) {
	f.Add("grant", []byte(`{"name":"jobs.nightly","holder":"worker-7","ttl":"15s","attributes":{"role":"primary"}}`))
	f.Fuzz(func(t *testing.T, verb string, body []byte) {
		kind := requestKinds[len(verb)%len(requestKinds)]
		for _, k := range requestKinds {
			if k.verb == verb {
				kind = k
			}
		}
		req := kind.new()
		if err := api.Decode(body, req); err != nil {
			if !errors.Is(err, api.ErrInvalidRequest) {
				t.Fatalf("Decode error %v does not wrap ErrInvalidRequest", err)
			}
			if code := api.ErrorBodyOf(kind.verb, err).Code; code != api.CodeInvalidArgument {
				t.Fatalf("a malformed %s body is answered %q, not %q", kind.verb, code, api.CodeInvalidArgument)
			}
			return
		}
		enc, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("a decoded %s request does not encode: %v", kind.verb, err)
		}
		again := kind.new()
		if err := api.Decode(enc, again); err != nil {
			t.Fatalf("%s: re-encoded request %s does not decode: %v", kind.verb, enc, err)
		}
		if !reflect.DeepEqual(normalize(req), normalize(again)) {
			t.Fatalf("%s: round trip changed the request:\n%+v\n%+v (via %s)", kind.verb, req, again, enc)
		}
		kind.check(t, req)
	})
}

// normalize maps empty maps to nil: omitempty drops an empty map, which
// decodes as none, and no handler tells the two apart.
func normalize(req any) any {
	v := reflect.ValueOf(req).Elem()
	out := reflect.New(v.Type()).Elem()
	out.Set(v)
	for i := range out.NumField() {
		if fv := out.Field(i); fv.Kind() == reflect.Map && fv.Len() == 0 {
			fv.SetZero()
		}
	}
	return out.Interface()
}

// checkName: a name the store accepts is a NATS subject's tail (the
// bucket's subjects are <prefix>.<name>): no wildcard, no space, no empty
// token, bounded.
func checkName(t *testing.T, name string) {
	t.Helper()
	if kvlease.ValidateName(name) != nil {
		return
	}
	if len(name) > kvlease.MaxNameLen || strings.ContainsAny(name, "*> \t\r\n") ||
		slicesContainsEmpty(strings.Split(name, ".")) {
		t.Fatalf("ValidateName accepted %q, which is no subject tail", name)
	}
}

func slicesContainsEmpty(tokens []string) bool {
	for _, tok := range tokens {
		if tok == "" {
			return true
		}
	}
	return false
}

// checkHolder: a holder the store accepts is bounded, printable UTF-8 (it
// goes into logs, errors and the held reply).
func checkHolder(t *testing.T, holder string) {
	t.Helper()
	if kvlease.ValidateHolder(holder) != nil {
		return
	}
	if len(holder) > kvlease.MaxHolderLen || strings.ContainsAny(holder, "\x00\n\r\t\x1b") {
		t.Fatalf("ValidateHolder accepted %q", holder)
	}
}

// checkRegistration: a registration that validates is a valid lease name,
// and the lease's record decodes back into the same registration (discovery
// reads registrations from records).
func checkRegistration(t *testing.T, reg api.Registration) {
	t.Helper()
	if reg.Validate() != nil {
		return
	}
	name := reg.LeaseName()
	if err := kvlease.ValidateName(name); err != nil {
		t.Fatalf("Validate accepted %+v, whose lease name %q is invalid: %v", reg, name, err)
	}
	got, ok := api.RegistrationOf(kvlease.Record{Name: name, Attributes: reg.Attributes()})
	if !ok {
		t.Fatalf("RegistrationOf does not recognise %q", name)
	}
	if len(reg.Meta) == 0 {
		reg.Meta = nil
	}
	if !reflect.DeepEqual(got, reg) {
		t.Fatalf("registration does not survive its lease:\n%+v\n%+v", reg, got)
	}
}
