package election_test

import (
	"context"
	"errors"
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

// Options a candidate's lease or keeper cannot take are refused at once,
// while another leads: not after the campaign has waited for, and won,
// the lease (it was granted, then refused, and observers saw a leader).
func TestCampaignRefusesBadOptionsBeforeWaiting(t *testing.T) {
	_, st := kvleasetest.NewStore(t)
	e, _ := election.New(st, "leader.badopts")
	lead, err := e.Campaign(t.Context(), "leader", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Orphan()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if _, err := e.Campaign(ctx, "bad", 10*time.Second, kvlease.WithKeeper(kvlease.WithOnLost(nil))); !errors.Is(err, kvlease.ErrInvalidOption) {
		t.Fatalf("campaign with a nil OnLost while another leads: %v, want ErrInvalidOption at once", err)
	}
}

// A candidate or a duration the store refuses is refused at once, also
// while the server does not answer: the campaign waited for the server,
// then returned its ctx's error, never naming what was wrong (an empty
// candidate, or 2 h against a 1 h maximum, through a cut connection;
// found by an outside client).
func TestCampaignRefusesBadInputWhileTheServerIsSilent(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	p := kvleasetest.NewProxy(t, srv.Addr())
	st := kvleasetest.OpenStore(t, p.URL())
	e, _ := election.New(st, "leader.silent")
	p.Cut()
	for _, tt := range []struct {
		name      string
		candidate string
		d         time.Duration
		want      error
	}{
		{"empty candidate", "", 10 * time.Second, kvlease.ErrInvalidHolder},
		{"candidate with a space at its end", "a ", 10 * time.Second, kvlease.ErrInvalidHolder},
		{"duration above the store's maximum", "a", 2 * time.Hour, kvlease.ErrDurationOutOfRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			if _, err := e.Campaign(ctx, tt.candidate, tt.d); !errors.Is(err, tt.want) {
				t.Fatalf("Campaign(%q, %v) with the server silent: %v, want %v at once", tt.candidate, tt.d, err, tt.want)
			}
		})
	}
}
