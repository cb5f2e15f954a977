package kvlease

import (
	"errors"
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
