package grantor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
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
	// The service's replies, to whichever inbox: the renewal's comes after
	// the holder has given up waiting for it.
	replies := make(chan *nats.Msg, 16)
	kvleasetest.Subscribe(t, kvleasetest.Connect(t, srv.ClientURL()), "_INBOX.>", func(m *nats.Msg) {
		if m.Header.Get(api.HeaderServerTime) != "" {
			replies <- m
		}
	})
	proxy.DelayReplies(150 * time.Millisecond)      // requests reach the service 150 ms late
	time.Sleep(l.Remaining() - 50*time.Millisecond) // send 50 ms before the deadline
	err = l.Renew(ctx)
	switch {
	case err == nil:
		t.Fatal("a renewal sent 50 ms before the deadline, 150 ms in transit, succeeded")
	case !errors.Is(err, kvlease.ErrUnavailable):
		return // this goroutine woke past the deadline: nothing was sent
	}
	select {
	case m := <-replies:
		if code := m.Header.Get(api.HeaderErrorCode); code != api.CodeTooLate {
			t.Errorf("the service answered the late renewal %q (%s), want %s", code, m.Data, api.CodeTooLate)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the service never answered the renewal")
	}
	if rec, err := st.Get(ctx, "late.renew"); err == nil && rec.Revision > l.Record().Revision {
		t.Errorf("the renewal was carried out after the holder's deadline: revision %d stored at %v",
			rec.Revision, rec.StoredAt.Format("15:04:05.000"))
	}
}

// A fresh client whose read of the grantor's clock goes unanswered (the
// grantor paused, or behind a slow link) does not send its grant: with no
// offset it would carry no deadline, and be carried out when it arrived,
// after its caller gave up, holding the lease for nobody for its TTL (an
// outside client found such a lease held for 61 s after SIGCONT). The read
// goes on, and its late reply measures the offset: the next attempt is
// sent, with a deadline (a grantor that is only slow costs one retry).
func TestFirstGrantIsNotSentWithoutADeadline(t *testing.T) {
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
	watcher := kvleasetest.Connect(t, srv.ClientURL())
	grants := make(chan *nats.Msg, 4)
	kvleasetest.Subscribe(t, watcher, api.SubjectGrant, func(m *nats.Msg) { grants <- m })

	proxy.DelayReplies(time.Second) // requests reach the service a second late
	nc := kvleasetest.Connect(t, srv.ClientURL())
	c := newClient(t, nc)
	req := kvlease.GrantRequest{Name: "slow.first", Holder: "h", Duration: time.Minute}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	rec, err := c.Grant(ctx, req)
	if !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("grant with the grantor's clock unread: %+v, %v; want ErrUnavailable", rec, err)
	}
	// Whatever the client sent has reached the server, and the server has
	// passed it on to this subscription, once both connections' round
	// trips are done.
	noGrantSent := func(client *nats.Conn) {
		t.Helper()
		for _, conn := range []*nats.Conn{client, watcher} {
			if err := conn.Flush(); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case m := <-grants:
			t.Fatalf("the grant was sent (deadline header %q), to be carried out when it arrives", m.Header.Get(api.HeaderDeadline))
		default:
		}
	}
	noGrantSent(nc)
	// The read's reply comes a second late, and measures the offset.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, _, ok := c.Clock().Offset(); ok {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the clock read's late reply measured no offset")
		}
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel2()
	if _, err := c.Grant(ctx2, req); err != nil {
		t.Fatalf("the next attempt, the offset known: %v", err)
	}
	if m := <-grants; m.Header.Get(api.HeaderDeadline) == "" {
		t.Error("the next attempt's grant carries no deadline")
	}

	// A caller with more time than the client's request timeout: the
	// clock read ends unanswered before a quarter of it has passed, and
	// the grant still does not go out without a deadline.
	proxy.DelayReplies(5 * time.Second)
	nc3 := kvleasetest.Connect(t, srv.ClientURL())
	c3 := newClient(t, nc3, client.WithTimeout(300*time.Millisecond))
	ctx3, cancel3 := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel3()
	if rec, err := c3.Grant(ctx3, kvlease.GrantRequest{Name: "slow.patient", Holder: "h", Duration: time.Minute}); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("grant with the clock read timed out: %+v, %v; want ErrUnavailable", rec, err)
	}
	noGrantSent(nc3)
}
