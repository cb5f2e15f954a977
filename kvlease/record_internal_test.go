package kvlease

import (
	"strings"
	"testing"
)

// secretMatches accepts exactly the grant's secret (any secret for a
// tenure granted without one), and allocates nothing: every renewal and
// release checks it.
func TestSecretMatches(t *testing.T) {
	const secret = "s3cr3t-0123456789abcdef0123456789"
	r := Record{secretHash: hashSecret(secret)}
	for _, tc := range []struct {
		secret string
		want   bool
	}{
		{secret, true},
		{secret + "x", false},
		{secret[1:], false},
		{"", false},
		{strings.Repeat("a", 2*MaxSecretLen), false},
	} {
		if got := r.secretMatches(tc.secret); got != tc.want {
			t.Errorf("secretMatches(%.20q…) = %v, want %v", tc.secret, got, tc.want)
		}
	}
	long := strings.Repeat("b", 2*MaxSecretLen)
	if !(Record{secretHash: hashSecret(long)}).secretMatches(long) {
		t.Error("a secret longer than MaxSecretLen does not match itself")
	}
	if !(Record{}).secretMatches("anything") {
		t.Error("a tenure granted without a secret refuses one")
	}
	if n := testing.AllocsPerRun(100, func() { r.secretMatches(secret) }); n != 0 {
		t.Errorf("secretMatches allocates %v times", n)
	}
}
