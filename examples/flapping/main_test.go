package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/kvlease/kvleasetest"
)

func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, srv.ClientURL(), 5); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	if !strings.Contains(s, "holder-a leads") || !strings.Contains(s, "holder-b leads") || !strings.Contains(s, "FLAPPING") {
		t.Fatalf("narrative:\n%s", s)
	}
}

// With fewer tenures asked for than the flag needs (more than 3), the
// holders go on flapping until it comes, and run returns: holders blocked
// on telling run of a lead it no longer read, and run waited for them
// forever, deaf to SIGINT (found by an outside client, with -changes 1).
func TestRunFewerTenuresThanTheFlagNeeds(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() { done <- run(t.Context(), &out, srv.ClientURL(), 1) }()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), "FLAPPING") {
			t.Fatalf("%v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("run(…, 1) still running after 60 s:\n%s", out.String())
	}
}
