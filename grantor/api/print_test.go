package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/api"
)

// The wire types that carry a holder's secret print it redacted, with
// every verb, as kvlease's records and requests do: a service or client
// that logs the requests it decodes (log.Printf("grant %+v", req)) gave
// the holder's proof of ownership away (found by a review: kvlease's own
// requests were redacted, these were not).
func TestPrintingHidesTheSecret(t *testing.T) {
	const secret = "s3cr3t-0123456789abcdef"
	values := []any{
		api.GrantRequest{Name: "print", Holder: "h", TTL: api.TTL(5e9), RequestID: "rid", Secret: secret},
		api.RenewRequest{Name: "print", Holder: "h", Token: 1, Revision: 2, Secret: secret},
		api.ReleaseRequest{Name: "print", Holder: "h", Token: 1, Revision: 2, Secret: secret},
		api.RegisterRequest{Service: "web", Instance: "a", Addr: "127.0.0.1:80", Holder: "h", Secret: secret},
		api.DeregisterRequest{Service: "web", Instance: "a", Holder: "h", Token: 1, Revision: 2, Secret: secret},
		api.Lease{Name: "print", Holder: "h", Token: 1, Revision: 2, Secret: secret},
	}
	for _, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
			if out := fmt.Sprintf(verb, v); strings.Contains(out, secret) {
				t.Errorf("%s of %T prints the secret: %s", verb, v, out)
			}
		}
		if out := fmt.Sprintf("%+v", v); !strings.Contains(out, "Holder:h") || !strings.Contains(out, "REDACTED") {
			t.Errorf("%%+v of %T: %s, want its fields, the secret redacted", v, out)
		}
	}
	// A pointer, and a lease inside a reply, print through the same method.
	grant := values[0].(api.GrantRequest)
	reply := api.ListReply{Leases: []api.Lease{values[5].(api.Lease)}}
	for _, v := range []any{&grant, reply, &reply} {
		if out := fmt.Sprintf("%+v", v); strings.Contains(out, secret) {
			t.Errorf("%%+v of %T prints the secret: %s", v, out)
		}
	}
	// Without a secret nothing is redacted: REDACTED would say there was one.
	if out := fmt.Sprintf("%+v", api.RenewRequest{Name: "n"}); strings.Contains(out, "REDACTED") {
		t.Errorf("%%+v of a renewal without a secret: %s", out)
	}
}
