package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/api"
)

func TestRegistrationValidate(t *testing.T) {
	for _, r := range []api.Registration{
		{Service: "", Instance: "i", Addr: "a:1"},
		{Service: "web.x", Instance: "i", Addr: "a:1"},
		{Service: "web", Instance: "i.2", Addr: "a:1"},
		{Service: "web", Instance: "i 2", Addr: "a:1"},
		{Service: "web", Instance: "i", Addr: ""},
		// The service's own checks are the command line's (an outside
		// client registered these through the API, which the CLI refuses).
		{Service: "web", Instance: "i", Addr: "notanaddr"},
		{Service: "web", Instance: "i", Addr: ":80"},
		{Service: "web", Instance: "i", Addr: "a:0"},
		// Control characters and spaces in the host went into discover's
		// output (found by an outside client).
		{Service: "web", Instance: "i", Addr: "ho\nst\x1b:80"},
		{Service: "web", Instance: "i", Addr: "a b:80"},
		{Service: "web", Instance: "i", Addr: "caf\u00e9:80"},
		// Characters of host names, not in their shape (review).
		{Service: "web", Instance: "i", Addr: "1.2.3.4.5:80"},
		{Service: "web", Instance: "i", Addr: "999.1.1.1:80"},
		{Service: "web", Instance: "i", Addr: "a..b:80"},
		{Service: "web", Instance: "i", Addr: "-a:80"},
		{Service: "web", Instance: "i", Addr: "a-.b:80"},
		{Service: "web", Instance: "i", Addr: "[fe80::zz]:80"},
		{Service: "web", Instance: "i", Addr: "a%b:80"},
		{Service: "web", Instance: "i", Addr: "a:1", Meta: map[string]string{"": "v"}},
		{Service: "*", Instance: "i", Addr: "a:1"},
		// Node names as gossip takes them (anything went; found by an
		// outside client).
		{Service: "web", Instance: "i", Addr: "a:1", Node: strings.Repeat("n", api.MaxNodeLen+1)},
		{Service: "web", Instance: "i", Addr: "a:1", Node: "a b\n\x00"},
		// Each name fine, the lease name too long: kvlease.ErrInvalidName
		// alone, where client.Register promises ErrInvalidRequest (found
		// by an outside client).
		{Service: strings.Repeat("s", 200), Instance: strings.Repeat("i", 200), Addr: "a:1"},
	} {
		if err := r.Validate(); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("%.60q: %v, want ErrInvalidRequest", r.LeaseName(), err)
		}
	}
	for _, addr := range []string{"a:1", "10.0.0.7:8080", "[fe80::1%eth0]:80", "[::1]:443", "db-1.prod.example.com:5432", "my_host:9",
		"db.example.com.:5432", "10-0-0-7.pods:80", "1e100.net:443", "localhost:8080",
		"123456789012:8080", "svc.123:80"} { // a container's host name (12 digits), a numeric last label
		if err := (api.Registration{Service: "web", Instance: "i-1", Addr: addr}).Validate(); err != nil {
			t.Errorf("addr %q: %v", addr, err)
		}
	}
	if err := (api.Registration{Service: "web", Instance: "i-1", Addr: "a:1", Node: "web-i-1-4711"}).Validate(); err != nil {
		t.Fatal(err)
	}
}

// A name is explained in the request's own terms, not as the lease name
// it would make ("svc.*.x" for a discovery of "*").
func TestValidateServiceNameSaysWhich(t *testing.T) {
	err := api.ValidateServiceName("service", "*")
	if !errors.Is(err, api.ErrInvalidRequest) || !strings.Contains(err.Error(), `service "*" has '*' at byte 0`) {
		t.Errorf("service *: %v", err)
	}
}
