package main

import (
	"bytes"
	"strings"
	"testing"

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
