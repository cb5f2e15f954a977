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
	if err := run(t.Context(), &out, srv.ClientURL()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"served local", "served authoritative", "config written by second"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("narrative lacks %q:\n%s", want, out.String())
		}
	}
	t.Log("\n" + out.String())
}
