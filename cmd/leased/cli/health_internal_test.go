package cli

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leased/leased/kvlease/kvleasetest"
)

// nats-server's health check fails one look now and then on a healthy
// node under load ("not current: group node unhealthy", "failed to be
// ready for connections after 1ms:"), gone at the next: /healthz says ok
// over such a look, and 503 only for a failure that lasts (found polling
// a three-node cluster's /healthz under leased bench: each node answered
// 503 one poll in a few hundred, the bench seeing no error).
func TestServeHealthOverlooksAPassingFailure(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	st := kvleasetest.OpenStoreOn(t, nc)
	errLag := errors.New("the embedded NATS server: JetStream stream '$G > KV_leases' is not current: group node unhealthy")
	for _, tc := range []struct {
		name  string
		fails int64 // looks that fail before one passes; -1: all
		ok    bool
	}{
		{"healthy", 0, true},
		{"one look fails", 1, true}, // asked again whatever the time: no race with the clock
		{"it lasts", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var looks atomic.Int64
			nats := func() error {
				if n := looks.Add(1); tc.fails < 0 || n <= tc.fails {
					return errLag
				}
				return nil
			}
			err := serveHealth(nc, nats, st)()
			switch {
			case tc.ok && err != nil:
				t.Errorf("/healthz's check after %d failed looks: %v, want ok", tc.fails, err)
			case !tc.ok && (err == nil || !strings.Contains(err.Error(), "not current")):
				t.Errorf("/healthz's check with nats-server's health failing for good: %v, want its reason", err)
			case !tc.ok && looks.Load() < 2:
				t.Errorf("nats-server's health asked %d times, want it asked again", looks.Load())
			}
		})
	}
}
