package faultcheck_test

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/leased/leased/cmd/leased/internal/faultcheck"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The summary of a run with a release, a crash, a false loss, faults, an
// orphan of a caller that retried and one violation, against testdata/summary.golden (go test -update
// rewrites it). Worked out by hand: L holds [10, 2000), [2110, 4797),
// [6010, 8697); M [10, 1010) until its refusal, then [1510, 4197).
func TestSummaryGolden(t *testing.T) {
	h, err := newHist().
		grant("h1", "L", 0, 10, 5).renew("h1", "L", 1000, 1010, 5, 5, 6).release("h1", "L", 2000, 2010, 5, 6).
		grant("h2", "L", 2100, 2110, 9).fault(faultcheck.FaultKillHolder, "h2", 2500, 2500).
		grant("h3", "L", 6000, 6010, 12).
		grant("h4", "M", 0, 10, 7).renewFails("h4", "M", 1000, 1010, 7, 7, notHolder, 0).
		grant("h5", "M", 1500, 1510, 8).
		grantFails("h6", "L", 7000, 7010, held, 9). // a lost acknowledgement: 12 was granted
		// An orphan of a caller that retried: h7's first attempt made
		// token 20 (h8 is told so), its retry came after it ended.
		attempt("h7", "L", "r7", 7500, 8500, faultcheck.CodeNoReply, faultcheck.Reply{}).
		attempt("h8", "L", "r8", 8000, 8010, held, heldBy("h7", 20)).
		attempt("h7", "L", "r7", 8600, 8610, "request_used", faultcheck.Reply{}).
		fault(faultcheck.FaultKillNode, "n2", 3000, 4000).
		op("end", "L", faultcheck.OpGet, 10000, 10000, faultcheck.Request{}, faultcheck.CodeNotFound, faultcheck.Reply{}).
		history()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := faultcheck.Check(h, faultcheck.DefaultParams())
	if err != nil {
		t.Fatal(err)
	}
	got := rep.Summary()
	path := filepath.Join("testdata", "summary.golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("summary:\n%s\nwant (%s):\n%s", got, path, want)
	}
}
