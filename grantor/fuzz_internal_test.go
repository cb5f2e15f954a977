package grantor

import (
	"testing"

	"github.com/leased/leased/grantor/api"
)

// FuzzGrantChecks runs the checks the service makes of a grant body before
// the store sees it (the store's own, of name, holder and duration, are
// fuzzed in grantor/api): whatever passes carries at most MaxAttributes
// attributes of at most MaxAttributeBytes in all, none with an empty key;
// whatever fails is the caller's fault on the wire. Seeds:
// testdata/fuzz/FuzzGrantChecks.
func FuzzGrantChecks(f *testing.F) {
	f.Add([]byte(`{"name":"jobs.nightly","holder":"worker-7","ttl":"15s","attributes":{"role":"primary"}}`))
	s := &Service{cfg: DefaultConfig()}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req api.GrantRequest
		if err := api.Decode(body, &req); err != nil {
			return
		}
		if err := s.checkAttributes(req.Attributes); err != nil {
			if code := api.ErrorBodyOf("grant", err).Code; code != api.CodeTooLarge && code != api.CodeInvalidArgument {
				t.Fatalf("attributes refused with code %q: %v", code, err)
			}
			return
		}
		if len(req.Attributes) > s.cfg.MaxAttributes {
			t.Fatalf("%d attributes accepted, limit %d", len(req.Attributes), s.cfg.MaxAttributes)
		}
		n := 0
		for k, v := range req.Attributes {
			if k == "" {
				t.Fatal("an empty attribute key accepted")
			}
			n += len(k) + len(v)
		}
		if n > s.cfg.MaxAttributeBytes {
			t.Fatalf("attributes of %d bytes accepted, limit %d", n, s.cfg.MaxAttributeBytes)
		}
	})
}
