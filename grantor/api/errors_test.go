package api_test

import (
	"errors"
	"testing"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// A stale read (issue 10 item 3) goes over the wire as unavailable, and
// back into Go as kvlease.ErrUnavailable, never as not_holder or expired.
func TestStaleReadIsUnavailableOnTheWire(t *testing.T) {
	for _, verb := range []string{"renew", "release", "get", "revoke", "grant"} {
		b := api.ErrorBodyOf(verb, &kvlease.StaleReadError{Name: "x", Seen: 555, Floor: 562})
		if b.Code != api.CodeUnavailable {
			t.Fatalf("%s: code %q, want %q", verb, b.Code, api.CodeUnavailable)
		}
		if err := b.Err(); !errors.Is(err, kvlease.ErrUnavailable) || errors.Is(err, kvlease.ErrNotHolder) {
			t.Fatalf("%s: client error %v, want ErrUnavailable only", verb, err)
		}
	}
}
