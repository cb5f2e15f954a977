package grantor_test

import (
	"testing"
	"time"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A renewal sent just before the holder's deadline that reaches the
// service after it (a slow link: 150 ms) is not carried out: the holder
// has given the lease up, and a renewal then would keep it taken by
// nobody for D + m_g. Its deadline header erred late by the clock
// estimate's bound and the service added 250 ms of slack, so it was.
func TestRenewalAfterTheHolderGaveUpIsNotCarriedOut(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL())
	proxy := kvleasetest.NewProxy(t, srv.Addr())
	svc, err := grantor.New(st, kvleasetest.Connect(t, proxy.URL()), grantor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(svc.Stop)
	c := newClient(t, kvleasetest.Connect(t, srv.ClientURL()))
	ctx := t.Context()
	l, err := kvlease.Acquire(ctx, c, "late.renew", "h1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := c.Clock().Offset(); !ok {
		t.Fatal("no clock offset after the grant: the renewal would carry no deadline")
	}
	proxy.DelayReplies(150 * time.Millisecond) // requests reach the service 150 ms late
	time.Sleep(l.Remaining() - 50*time.Millisecond)
	if err := l.Renew(ctx); err == nil {
		t.Fatal("a renewal sent 50 ms before the deadline, 150 ms in transit, succeeded")
	}
	// Had the service carried it out, it would have stored it about 100 ms
	// after the holder's deadline (the 150 ms in transit, less the 50 ms
	// left); look well after that.
	time.Sleep(500 * time.Millisecond)
	if rec, err := st.Get(ctx, "late.renew"); err == nil && rec.Revision > l.Record().Revision {
		t.Errorf("the renewal was carried out after the holder's deadline: revision %d stored at %v",
			rec.Revision, rec.StoredAt.Format("15:04:05.000"))
	}
}
