package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leased/leased/kvlease/kvleasetest"
)

// The example tells its story against a real server, and run itself
// checks the ending: every item done once, at the sink, the crashed
// worker's item by another worker with a newer token.
func TestRun(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	var out bytes.Buffer
	if err := run(t.Context(), &out, srv.ClientURL()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"crashes while making the thumbnail", "after " + crasher + " crashed holding it",
		"all 50 items done exactly once"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("narrative lacks %q:\n%s", want, out.String())
		}
	}
	t.Log("\n" + out.String())
}
