package kvleasetest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// The fake compares and sets as the Store does, lapses keys at the server
// TTL on the bubble's clock, and answers as its mode says.
func TestFakeGrantor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		g := kvleasetest.NewFakeGrantor()
		const d = 3 * time.Second
		rec, err := g.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h1", Duration: d})
		if err != nil || rec.Token == 0 || uint64(rec.Token) != rec.Revision {
			t.Fatalf("Grant = %+v, %v", rec, err)
		}
		var held *kvlease.HeldError
		if _, err := g.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h2", Duration: d}); !errors.As(err, &held) || held.Holder != "h1" {
			t.Fatalf("second Grant = %v, want HeldError by h1", err)
		}
		renew := kvlease.RenewRequest{Name: "a", Holder: "h1", Token: rec.Token, Revision: rec.Revision, Duration: d}
		next, err := g.Renew(ctx, renew)
		if err != nil || next.Token != rec.Token || next.Revision <= rec.Revision {
			t.Fatalf("Renew = %+v, %v", next, err)
		}
		var stale *kvlease.StaleRevisionError
		if _, err := g.Renew(ctx, renew); !errors.As(err, &stale) || stale.Revision != next.Revision {
			t.Fatalf("Renew at the old revision = %v, want StaleRevisionError at %d", err, next.Revision)
		}
		if _, err := g.Renew(ctx, kvlease.RenewRequest{Name: "a", Holder: "h2", Token: rec.Token, Revision: next.Revision}); !errors.Is(err, kvlease.ErrNotHolder) {
			t.Fatalf("Renew by another holder = %v, want ErrNotHolder", err)
		}

		for _, c := range []struct {
			name string
			mode kvleasetest.FakeMode
			want error
		}{
			{"refuse", kvleasetest.FakeRefuse, kvlease.ErrNotHolder},
			{"fail fast", kvleasetest.FakeFailFast, kvlease.ErrUnavailable},
			{"lose reply", kvleasetest.FakeLoseReply, kvlease.ErrUnavailable},
		} {
			g.SetMode(c.mode)
			cur, _ := g.Lookup("a")
			renew.Revision = cur.Revision
			if _, err := g.Renew(ctx, renew); !errors.Is(err, c.want) {
				t.Errorf("%s: Renew = %v, want %v", c.name, err, c.want)
			}
			after, _ := g.Lookup("a")
			if stored := after.Revision != cur.Revision; stored != (c.mode == kvleasetest.FakeLoseReply) {
				t.Errorf("%s: renewal stored = %v", c.name, stored)
			}
		}
		g.SetMode(kvleasetest.FakeUnreachable)
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err = g.Grant(rctx, kvlease.GrantRequest{Name: "b", Holder: "h1", Duration: d})
		cancel()
		if !errors.Is(err, kvlease.ErrUnavailable) || time.Since(start) != time.Second {
			t.Fatalf("unreachable Grant = %v after %v, want ErrUnavailable at ctx's end", err, time.Since(start))
		}
		g.SetMode(kvleasetest.FakeOK)
		if n := len(g.Renewals()); n != 6 {
			t.Errorf("%d renewals recorded, want 6", n)
		}

		cur, _ := g.Lookup("a")
		if err := g.Release(ctx, kvlease.ReleaseRequest{Name: "a", Holder: "h1", Token: cur.Token, Revision: cur.Revision}); err != nil {
			t.Fatalf("Release = %v", err)
		}
		if _, ok := g.Lookup("a"); ok || len(g.Releases()) != 1 {
			t.Fatalf("after Release: live %v, releases %v", ok, g.Releases())
		}

		rec, err = g.Grant(ctx, kvlease.GrantRequest{Name: "a", Holder: "h2", Duration: d})
		if err != nil || g.Grants() != 2 {
			t.Fatalf("Grant after Release = %v (%d grants)", err, g.Grants())
		}
		time.Sleep(kvlease.ServerTTL(d, kvleasetest.FakeGrantorMargin) - time.Nanosecond)
		if _, ok := g.Lookup("a"); !ok {
			t.Fatal("lapsed before its server TTL")
		}
		time.Sleep(time.Nanosecond)
		if _, ok := g.Lookup("a"); ok {
			t.Fatal("live at its server TTL")
		}
		if _, err := g.Renew(ctx, kvlease.RenewRequest{Name: "a", Holder: "h2", Token: rec.Token, Revision: rec.Revision}); !errors.Is(err, kvlease.ErrNotFound) {
			t.Fatalf("Renew after the lapse = %v, want ErrNotFound", err)
		}
	})
}
