package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

func TestPermissionError(t *testing.T) {
	for _, c := range []struct {
		msg, op, subject string
	}{
		{`Permissions Violation for Publish to "lease.admin.v1.revoke"`, "publish", "lease.admin.v1.revoke"},
		{`Permissions Violation for Subscription to "_INBOX.abc.*"`, "subscribe", "_INBOX.abc.*"},
		{`Permissions Violation for Subscription to "svc.v1.>" using queue "q"`, "subscribe", "svc.v1.>"},
	} {
		pe := permissionError(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, c.msg))
		if pe == nil || pe.Op != c.op || pe.Subject != c.subject {
			t.Errorf("%s: %+v, want %s %s", c.msg, pe, c.op, c.subject)
			continue
		}
		if !errors.Is(pe, ErrPermissionDenied) || !errors.Is(pe, nats.ErrPermissionViolation) || exitCode(pe) != ExitDenied {
			t.Errorf("%v: does not match its sentinels or exit code", pe)
		}
	}
	// A refused update of the bucket's stream says why serve sends one,
	// and how to do without: it said only the subject (found by an outside
	// client).
	for _, stream := range []string{"KV_leases", "LEASED_HISTORY_leases"} {
		pe := permissionError(fmt.Errorf("%w: %s", nats.ErrPermissionViolation, `Permissions Violation for Publish to "$JS.API.STREAM.UPDATE.`+stream+`"`))
		if pe == nil || !strings.Contains(pe.Error(), "--grantor-margin") || !strings.Contains(pe.Error(), "docs/api.md") {
			t.Errorf("update of %s refused: %v, want why serve updates it and the user that may", stream, pe)
		}
	}
	if pe := permissionError(nats.ErrMaxSubscriptionsExceeded); pe != nil {
		t.Errorf("not a permissions violation: %v", pe)
	}
}

// What any client may set (a revocation's reason, attributes) reaches an
// operator's terminal escaped (history and get printed ESC and BEL raw:
// found by an outside client).
func TestTextSafe(t *testing.T) {
	for in, want := range map[string]string{
		"plain words":                       "plain words",
		"\x1b[2J\x1b[31mcleared\x1b[0m\x07": `\x1b[2J\x1b[31mcleared\x1b[0m\a`,
		"two\nlines\tand a tab":             `two\nlines\tand a tab`,
		"bidi \u202egnp.exe":                `bidi \u202egnp.exe`,
		"café, 東京":                          "café, 東京",
	} {
		if got := textSafe(in); got != want {
			t.Errorf("textSafe(%q) = %q, want %q", in, got, want)
		}
	}
}

// The "leased: …" line of an error or warning carries strings others
// chose: a revocation's reason reached the terminal of acquire --hold,
// register and renew with its ESC and BEL raw ("lease lost: … was revoked:
// REASON"; found by an outside client).
func TestLineLogEscapesText(t *testing.T) {
	var b strings.Builder
	newLineLog(&b, "text").print(slog.LevelError, "lease lost: a: was revoked: x\x1b]0;pwned\x07y")
	if got, want := b.String(), `leased: lease lost: a: was revoked: x\x1b]0;pwned\ay`+"\n"; got != want {
		t.Errorf("printed %q, want %q", got, want)
	}
}
