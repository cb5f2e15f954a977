package client_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/client"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// A "held" answer that names an older tenure than one this client has
// seen comes from a node whose view is behind (a stream leader cut off
// from its peers reads from its frozen state): it is ErrUnavailable, so
// that kvlease.Acquire asks again, not ErrHeld. The nemesis found a grant
// retried with its request ID and told "held by token 22" after its own
// token 25 and the tenure its first attempt made, 38: the caller stopped,
// its tenure an orphan. Here a stand-in for such nodes, on a real server,
// answers in turn.
func TestHeldByAnOlderTenureIsNotAnAnswer(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	nc := kvleasetest.Connect(t, srv.ClientURL())
	answers := make(chan func(m *nats.Msg), 4)
	kvleasetest.Subscribe(t, nc, api.SubjectGrant, func(m *nats.Msg) { (<-answers)(m) })
	granted := func(tok uint64) func(m *nats.Msg) {
		return func(m *nats.Msg) {
			l := api.Lease{Name: "stale.a", Holder: "h2", Token: tok, Revision: tok}
			data, _ := json.Marshal(l)
			_ = m.Respond(data)
		}
	}
	held := func(tok uint64) func(m *nats.Msg) {
		return func(m *nats.Msg) {
			refuse(m, "grant", &kvlease.HeldError{Name: "stale.a", Holder: "h2", Token: kvlease.Token(tok)})
		}
	}
	c, err := client.New(nc, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	grant := func() error {
		_, err := c.Grant(t.Context(), kvlease.GrantRequest{Name: "stale.a", Holder: "h2", Duration: 3 * time.Second})
		return err
	}
	answers <- granted(25)
	if err := grant(); err != nil {
		t.Fatal(err)
	}
	answers <- held(22)
	if err := grant(); !errors.Is(err, kvlease.ErrUnavailable) || errors.Is(err, kvlease.ErrHeld) {
		t.Fatalf("held by token 22 after token 25: %v, want ErrUnavailable", err)
	}
	answers <- held(38) // a later tenure: an answer
	var he *kvlease.HeldError
	if err := grant(); !errors.As(err, &he) || he.Token != 38 {
		t.Fatalf("held by token 38: %v, want ErrHeld naming it", err)
	}
	answers <- held(25) // older than 38, seen last
	if err := grant(); !errors.Is(err, kvlease.ErrUnavailable) {
		t.Fatalf("held by token 25 after token 38: %v, want ErrUnavailable", err)
	}
}
