package grantor

import (
	"testing"
	"time"

	"github.com/leased/leased/grantor/history"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
	"github.com/leased/leased/telemetry"
)

func TestEndCause(t *testing.T) {
	for _, c := range []struct {
		ev   kvlease.Event
		want string
	}{
		{kvlease.Event{Type: kvlease.EventReleased}, history.EndReleased},
		{kvlease.Event{Type: kvlease.EventExpired}, history.EndExpired},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: "stuck"}, history.EndRevoked},
		{kvlease.Event{Type: kvlease.EventRevoked, Reason: history.GossipReasonPrefix + "node declared dead: web-1"}, history.EndRemoved},
	} {
		if got := endCause(c.ev); got != c.want {
			t.Errorf("endCause(%v %q) = %s, want %s", c.ev.Type, c.ev.Reason, got, c.want)
		}
	}
}

// An end of a later tenure than the one the observer has open (its watch
// lagged past the open one's end and the later one's begin: the bucket
// keeps one entry per lease) records the open one's end too, cause
// unknown, and the later one's with its own holder and cause.
func TestObserverEndOfAnUnseenTenure(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	s, err := New(st, kvleasetest.Connect(t, srv.ClientURL()), DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	hist, err := history.Open(ctx, st.JetStream(), st.Bucket(), history.Options{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{s: s, hist: hist, candidate: "test", flaps: telemetry.NewFlapDetector(time.Minute, 3)}
	now := time.Now()
	open := map[string]*openTenure{"gap.a": {token: 2, renewals: 1}}
	end := kvlease.Event{Type: kvlease.EventRevoked, Name: "gap.a", Revision: 6, Time: now, Holder: "h2", Token: 5,
		GrantedAt: now.Add(-time.Second), Reason: "stuck"}
	if err := o.report(ctx, end, 0, open); err != nil {
		t.Fatal(err)
	}
	recs, err := hist.Read(ctx, "gap.", now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 ||
		recs[0].Kind != history.KindEnded || recs[0].Token != 2 || recs[0].EndedBy != "unknown" || recs[0].Renewals != 1 ||
		recs[1].Kind != history.KindEnded || recs[1].Token != 5 || recs[1].Holder != "h2" || recs[1].EndedBy != history.EndRevoked {
		t.Fatalf("history %+v, want the end of token 2 (unknown, 1 renewal), then token 5's revocation by h2", recs)
	}
	if len(open) != 0 {
		t.Errorf("open tenures left: %v", open)
	}
}
