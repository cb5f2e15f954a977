package kvlease_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leased/leased/"

// layers says what each package under kvlease/ and telemetry/ may import
// from this module: the import graph README's Layout draws. Imports point
// down: telemetry below the lease core, the core below its fence and
// recipes, and nothing here imports grantor/, membership/ or cmd/. A new
// package under these trees must be added here.
var layers = map[string][]string{
	"telemetry":           {},
	"telemetry/otelsetup": {"telemetry"},
	"kvlease":             {"telemetry"},
	"kvlease/fence":       {"kvlease", "kvlease/internal/kvcas", "telemetry"},
	"kvlease/election":    {"kvlease", "telemetry"},
	"kvlease/readlease":   {"kvlease"},
	"kvlease/workqueue":   {"kvlease", "kvlease/fence", "kvlease/internal/kvcas", "telemetry"},
	"kvlease/kvleasetest": {"kvlease", "telemetry"},

	// The compare-and-set loop that fence.KV and the work queue's sink
	// share: under kvlease/internal/, only kvlease's tree can import it.
	"kvlease/internal/kvcas": {"kvlease"},
	// Metric readers for tests.
	"telemetry/telemetrytest": {},
}

// Every import of the packages under kvlease/ and telemetry/ points down
// (see layers), and their tests stay within the two trees: a test of
// kvlease may use its fence or kvleasetest, never grantor/embedded.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-f",
		"{{.ImportPath}}\t{{join .Imports \" \"}}\t{{join .TestImports \" \"}} {{join .XTestImports \" \"}}",
		module+"kvlease/...", module+"telemetry/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	seen := 0
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		if len(f) != 3 {
			t.Fatalf("go list: unexpected line %q", line)
		}
		pkg := strings.TrimPrefix(f[0], module)
		allowed, ok := layers[pkg]
		if !ok {
			t.Errorf("%s: not in the layers table: add it with what it may import", pkg)
			continue
		}
		seen++
		for _, imp := range internal(f[1]) {
			if !slices.Contains(allowed, imp) {
				t.Errorf("%s imports %s: allowed are %v", pkg, imp, allowed)
			}
		}
		tree := strings.SplitN(pkg, "/", 2)[0]
		for _, imp := range internal(f[2]) {
			if top := strings.SplitN(imp, "/", 2)[0]; top != "telemetry" && top != tree {
				t.Errorf("%s's tests import %s, outside %s/ and telemetry/", pkg, imp, tree)
			}
		}
	}
	if seen != len(layers) {
		t.Errorf("go list found %d of the %d packages in the layers table", seen, len(layers))
	}
}

// internal returns the module's packages among the space-separated imports,
// without the module prefix.
func internal(imports string) []string {
	var pkgs []string
	for _, imp := range strings.Fields(imports) {
		if p, ok := strings.CutPrefix(imp, module); ok {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}
