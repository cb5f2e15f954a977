package kvleasetest_test

import (
	"testing"

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
