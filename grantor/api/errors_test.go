package api_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// Joined errors (a bad name and a bad holder) read as one line for people,
// each part without its Go package name, and still come back into Go as
// the name error.
func TestJoinedErrorsOnOneLine(t *testing.T) {
	err := errors.Join(kvlease.ValidateName(""), kvlease.ValidateHolder(""))
	msg := api.Message(err)
	if want := "invalid lease name: empty; invalid holder: empty"; msg != want {
		t.Fatalf("Message = %q, want %q", msg, want)
	}
	if back := api.ErrorBodyOf("grant", err).Err(); !errors.Is(back, kvlease.ErrInvalidName) {
		t.Fatalf("back in Go: %v, want ErrInvalidName", back)
	}
}

// A renewal of a tenure that has ended reads as ended, not "expired": the
// holder may have been revoked (a holder's "lease lost" line said
// "expired: lease not found … or revoked").
func TestEndedTenureReadsAsEnded(t *testing.T) {
	err := api.ErrorBodyOf("renew", fmt.Errorf("%w: %q lapsed or was released or revoked", kvlease.ErrNotFound, "k1")).Err()
	if !errors.Is(err, kvlease.ErrNotFound) || strings.HasPrefix(err.Error(), "expired") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("renew of an ended tenure: %q; want it to say the tenure ended, lapsed or was released or revoked", err)
	}
}

// A hold with less than a millisecond left is still a hold on the wire
// (held_back_ms rounded down to 0 read as a plain "held", for whose end a
// caller waits on an event that never comes; found in review).
func TestHeldBackRoundsUp(t *testing.T) {
	b := api.ErrorBodyOf("grant", &kvlease.HeldError{Name: "x", Holder: "h", Token: 3, HeldBack: 300 * time.Microsecond})
	var held *kvlease.HeldError
	if b.HeldBackMS != 1 || !errors.As(b.Err(), &held) || held.HeldBack != time.Millisecond {
		t.Fatalf("a hold of 0.3 ms: held_back_ms %d, back in Go %+v; want 1 ms", b.HeldBackMS, held)
	}
}

// too_late says so: it is unavailable to Go callers (they send again),
// but its message began "grantor unavailable", which read as another
// error (found by an outside client).
func TestTooLateSaysSo(t *testing.T) {
	b := api.ErrorBodyOf("renew", fmt.Errorf("%w (by 3s); nothing was done", api.ErrTooLate))
	if b.Code != api.CodeTooLate || !strings.HasPrefix(b.Message, "too late") {
		t.Fatalf("on the wire: %+v, want code %s and a message that says too late", b, api.CodeTooLate)
	}
	if err := b.Err(); !errors.Is(err, api.ErrTooLate) || !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("back in Go: %v, want ErrTooLate and ErrUnavailable", err)
	}
}
