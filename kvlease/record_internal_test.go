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

// A grant checks a revocation's hold on the end it read at the revision it
// will name, never on a second look at the cache, which drops entries when
// full: an end it does not have at that revision is unknown, to be read
// again, not "nothing holds it" (found in review).
func TestHeldByAnUnknownEndIsNotFree(t *testing.T) {
	var s Store // these answers read nothing
	if held, known := s.heldBy(t.Context(), "a", 0, nil); held != nil || !known {
		t.Errorf("no entry: %v, known %v; want free, known", held, known)
	}
	if held, known := s.heldBy(t.Context(), "a", 7, nil); held != nil || known {
		t.Errorf("an end at 7 the cache forgot: %v, known %v; want unknown", held, known)
	}
	if held, known := s.heldBy(t.Context(), "a", 7, &tombstone{rev: 5}); held != nil || known {
		t.Errorf("the end at 5 for a grant at 7: %v, known %v; want unknown", held, known)
	}
}
