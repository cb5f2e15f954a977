package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/election"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A campaign takes lease options (here a holder margin and a clock guard)
// and keeper options; nil options are refused before anything is tried.
func TestCampaignOptions(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	ctx := t.Context()
	e, err := election.New(st, "leader.opts")
	if err != nil {
		t.Fatal(err)
	}
	kvleasetest.CheckHoldOptions(t, func(d time.Duration, opts ...kvlease.HoldOption) (*kvlease.Lease, error) {
		c, err := e.Campaign(ctx, "c", d, opts...)
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = c.Resign(context.Background()) })
		return c.Lease(), nil
	})
}
