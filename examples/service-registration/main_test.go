package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/grantor/api"
	"github.com/leased/leased/grantor/registry"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()

	var out strings.Builder
	if err := run(ctx, &out, srv.ClientURL()); err != nil {
		t.Fatalf("run: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("output:\n%s", out.String())
	for _, want := range []string{
		"registry: added web/web-1 at 10.0.0.1:8080",
		"registry: added web/web-2 at 10.0.0.2:8080",
		`discover "web": web-1 at 10.0.0.1:8080, web-2 at 10.0.0.2:8080`,
		`registry: removed web/web-1, cause "deregistered"`,
		`registry: removed web/web-2, cause "ttl"`,
		`discover "web": no instances`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The real state: no registration left in the bucket, and a fresh
	// registry discovers none.
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithBucket(leaseBucket))
	if recs, err := st.List(ctx, api.RegistrationPrefix+service+"."); err != nil || len(recs) != 0 {
		t.Errorf("registrations left: %+v, %v", recs, err)
	}
	reg, err := registry.New(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	if found := reg.Discover(ctx, service, 0); len(found) != 0 {
		t.Errorf("a fresh registry discovers %+v", found)
	}
}
