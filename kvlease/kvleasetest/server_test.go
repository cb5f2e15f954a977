package kvleasetest_test

import (
	"errors"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/leased/leased/grantor/embedded"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Server options refuse values they cannot take, and Start returns their
// error before it starts anything.
func TestServerOptionsRefuseBadValues(t *testing.T) {
	for name, opt := range map[string]kvleasetest.ServerOption{
		"nil option":     nil,
		"empty data dir": kvleasetest.WithDataDir(""),
		"port 0":         kvleasetest.WithPort(0),
		"port 65536":     kvleasetest.WithPort(65536),
	} {
		if s, err := kvleasetest.Start(t.TempDir(), opt); err == nil || s != nil {
			if s != nil {
				s.Shutdown()
			}
			t.Errorf("%s: Start = (%v, %v), want an error", name, s, err)
		}
	}
}

// A server that cannot listen fails at once with nats-server's reason
// (it waited 10 s and said only "not ready").
func TestStartReportsPortInUse(t *testing.T) {
	first := kvleasetest.NewServer(t)
	u, err := url.Parse(first.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	s, err := kvleasetest.Start(t.TempDir(), kvleasetest.WithPort(port))
	if err == nil {
		s.Shutdown()
		t.Fatalf("a second server on port %d started", port)
	}
	if !errors.Is(err, embedded.ErrStart) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a port in use: %v, want embedded.ErrStart with the reason", err)
	}
}
