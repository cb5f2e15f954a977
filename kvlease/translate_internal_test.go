package kvlease

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// A stream the cluster cannot place (fewer servers than replicas) says
// why in words: serve on a two-node cluster exited with only "no
// suitable peers for placement" (found by an outside client).
func TestTranslateNoPeers(t *testing.T) {
	err := translate("create bucket", &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: "no suitable peers for placement"})
	if !errors.Is(err, ErrBucket) || !strings.Contains(err.Error(), "fewer JetStream servers than the replicas") {
		t.Fatalf("translate(no peers) = %v; want ErrBucket saying the cluster is too small", err)
	}
	err = translate("create bucket", &jetstream.APIError{Code: 400, ErrorCode: errCodeNoPeers, Description: noPeersOffline})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("translate(no peers, peer offline) = %v; want ErrUnavailable (a node not back yet)", err)
	}
}

// A publish's refusal, which nats.go wraps in a second "nats: " (its
// APIError's message begins with one), is told with one: the no-quorum
// grant said "nats: nats: API error" (found by an outside client). The
// error is still the APIError underneath.
func TestTranslateOneNATSPrefix(t *testing.T) {
	api := &jetstream.APIError{Code: 409, ErrorCode: errCodeDuplicateInProcess, Description: "duplicate message id is in process"}
	err := translate("grant", fmt.Errorf("nats: %w", api)) // as jetstream's publish returns it
	var got *jetstream.APIError
	if !errors.As(err, &got) || got != api || !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "nats: nats:") {
		t.Fatalf("translate(publish refusal) = %q; want ErrUnavailable over the APIError, with one nats: prefix", err)
	}
}
