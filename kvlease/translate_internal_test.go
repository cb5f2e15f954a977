package kvlease

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// A publish refused by nats.go while it reconnects (ConnOptions buffers
// nothing then) is unavailable and says so in words: it surfaced as
// "nats: outbound buffer limit exceeded" (found by an outside client).
func TestTranslateReconnecting(t *testing.T) {
	err := translate("renew", nats.ErrReconnectBufExceeded)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrNotSent) || !errors.Is(err, nats.ErrReconnectBufExceeded) || !strings.Contains(err.Error(), "reconnecting") {
		t.Fatalf("translate(ErrReconnectBufExceeded) = %v; want ErrUnavailable and ErrNotSent, saying the connection is reconnecting", err)
	}
}
