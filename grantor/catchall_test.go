package grantor_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/kvlease"
)

// The catch-all answers unknown verbs without receiving a copy of every
// request: the endpoints of one service together take each request once
// (micro's request counts add up to the requests sent), and known verbs
// are answered whichever endpoint takes them.
func TestEveryRequestArrivesOnce(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	received := func() (int, map[string]int) {
		t.Helper()
		var total int
		by := map[string]int{}
		for _, e := range serviceStats(t, f.nc).Endpoints {
			total += e.NumRequests
			by[e.Subject] = e.NumRequests
		}
		return total, by
	}
	// The client's first request reads the grantor's clock: counted before.
	if _, err := f.client.Get(ctx, "once.none"); !errors.Is(err, kvlease.ErrNotFound) {
		t.Fatal(err)
	}
	before, _ := received()
	const grants, unknown = 40, 5
	for i := range grants {
		if _, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: fmt.Sprintf("once.%d", i), Holder: "h", Duration: 10 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	for range unknown {
		m, err := f.nc.Request("lease.v1.frobnicate", []byte("{}"), 5*time.Second)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != api.CodeInvalidArgument {
			t.Fatalf("unknown verb: %v %v", m, err)
		}
	}
	if total, by := received(); total-before != grants+unknown {
		t.Fatalf("the service's endpoints received %d requests (%v, %d before), %d were sent", total-before, by, before, grants+unknown)
	}
}

// A renewal or release that names token or revision 0 (or leaves them
// out) is a bad request, answered invalid_argument, and a Go client sees
// kvlease.ErrInvalidTenure. It was answered internal ("lease bucket
// unusable": the server refused a read of revision 0), found by an
// outside client.
func TestRenewalWithoutARevisionIsABadRequest(t *testing.T) {
	f := start(t, grantor.DefaultConfig())
	ctx := t.Context()
	rec, err := f.client.Grant(ctx, kvlease.GrantRequest{Name: "zero", Holder: "h", Duration: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ subject, body string }{
		{api.SubjectRenew, fmt.Sprintf(`{"name":"zero","holder":"h","token":%d,"revision":0,"secret":%q}`, rec.Token, rec.Secret)},
		{api.SubjectRelease, fmt.Sprintf(`{"name":"zero","holder":"h","token":%d,"secret":%q}`, rec.Token, rec.Secret)},
		{api.SubjectRenew, fmt.Sprintf(`{"name":"zero","holder":"h","revision":%d,"secret":%q}`, rec.Revision, rec.Secret)},
	} {
		m, err := f.nc.Request(r.subject, []byte(r.body), 5*time.Second)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != api.CodeInvalidArgument {
			t.Errorf("%s %s: %v %v", r.subject, r.body, m.Header, err)
		}
	}
	_, err = f.client.Renew(ctx, kvlease.RenewRequest{Name: "zero", Holder: "h", Token: rec.Token, Secret: rec.Secret})
	if !errors.Is(err, kvlease.ErrInvalidTenure) {
		t.Errorf("the Go client's renewal without a revision: %v, want ErrInvalidTenure", err)
	}
	if _, err := f.store.Get(ctx, "zero"); err != nil {
		t.Errorf("the lease after the bad requests: %v", err)
	}
}
