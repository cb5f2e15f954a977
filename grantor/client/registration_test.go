package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// Register refuses keeper options that Keep would refuse before it sends
// anything, as election.Campaign and workqueue.Claim do: it granted the
// registration first, then released it, and with the instance registered
// by another it answered "held", never naming the bad option (found by an
// outside client).
func TestRegisterRefusesBadKeeperOptionsBeforeSending(t *testing.T) {
	reg := api.Registration{Service: "web", Instance: "i1", Addr: "10.0.0.7:8080"}
	for name, tc := range map[string]struct {
		opt  kvlease.KeeperOption
		want error
	}{
		"nil option":        {nil, kvlease.ErrInvalidOption},
		"nil OnLost":        {kvlease.WithOnLost(nil), kvlease.ErrInvalidOption},
		"interval too long": {kvlease.WithRenewInterval(2 * time.Second), kvlease.ErrInvalidTiming},
	} {
		t.Run(name, func(t *testing.T) {
			g := kvleasetest.NewFakeGrantor()
			k, err := client.Register(t.Context(), g, reg, "h1", 3*time.Second, tc.opt)
			if !errors.Is(err, tc.want) || k != nil {
				t.Fatalf("Register = %v, %v; want %v", k, err, tc.want)
			}
			if n := g.Grants(); n != 0 {
				t.Fatalf("%d grants sent for a registration refused", n)
			}
		})
	}
}
