package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease/fence"
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
		`B: saw "ledger" expired (holder A, token 1)`,
		"A: write refused by the fence: token 1 is stale",
		`B: released "ledger"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}

	// The resource holds B's value, written with B's (higher) token.
	js := kvleasetest.JetStream(t, kvleasetest.Connect(t, srv.ClientURL()))
	fc, err := fence.OpenKV(ctx, js, fenceBucket)
	if err != nil {
		t.Fatal(err)
	}
	v, err := fc.Read(ctx, resource)
	if err != nil {
		t.Fatal(err)
	}
	if string(v.Data) != valueB || v.Token <= 1 {
		t.Errorf("final value %q with token %d, want %q with a token above A's 1", v.Data, v.Token, valueB)
	}
}
