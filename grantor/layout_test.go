package grantor_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/leased/leased"

// layers is the import order README's Layout section documents, top first:
// a package may import packages of its own layer and of the layers below
// it, never one above. Its tests may also use packages above it within
// its own top-level tree (a kvlease test may use kvlease/fence), never
// another tree's (a kvlease test never uses grantor/embedded). "x/..." is
// x and everything under it; the most specific pattern decides.
var layers = [][]string{
	{"cmd/...", "examples/..."},
	{"cmd/leased/internal/faultcheck/..."},
	{"grantor/registry/..."},
	{"grantor"},
	{"grantor/timeline/..."},
	{"grantor/history/..."},
	{"grantor/client/..."},
	{"grantor/api/..."},
	{"kvlease/workqueue/..."},
	{"kvlease/fence/...", "kvlease/election/...", "kvlease/readlease/..."},
	{"kvlease/internal/..."},
	{"kvlease", "kvlease/kvleasetest/..."},
	{"membership/...", "telemetry/...", "kvlease/atomicbatch/...", "kvlease/follow/...", "kvlease/redact/..."},
	{"grantor/embedded/..."},
}

// tree is a package's top-level directory.
func tree(rel string) string { return strings.SplitN(rel, "/", 2)[0] }

// layerOf returns the layer of a package path relative to the module, and
// false for a package no pattern covers.
func layerOf(rel string) (int, bool) {
	best, bestLen := -1, -1
	for i, pats := range layers {
		for _, p := range pats {
			base, tree := strings.CutSuffix(p, "/...")
			if (rel == base || tree && strings.HasPrefix(rel, base+"/")) && len(base) > bestLen {
				best, bestLen = i, len(base)
			}
		}
	}
	return best, best >= 0
}

type pkgImports struct {
	path          string
	imports, test []string // test: the tests' imports (in-package and _test)
}

func goList(t *testing.T) []pkgImports {
	t.Helper()
	out, err := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`, module+"/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	var pkgs []pkgImports
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 3 {
			t.Fatalf("go list line %q", line)
		}
		pkgs = append(pkgs, pkgImports{path: f[0], imports: strings.Fields(f[1]), test: strings.Fields(f[2])})
	}
	return pkgs
}

// Every import points down the documented order, tests included.
func TestImportsPointDown(t *testing.T) {
	for _, p := range goList(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")
		from, ok := layerOf(rel)
		if !ok {
			t.Errorf("%s is in no layer: add it to README's Layout and to layers", rel)
			continue
		}
		for i, imp := range slices.Concat(p.imports, p.test) {
			irel, ours := strings.CutPrefix(imp, module+"/")
			if !ours || imp == p.path {
				continue
			}
			to, ok := layerOf(irel)
			switch {
			case !ok:
				t.Errorf("%s imports %s, which is in no layer", rel, irel)
			case to < from && i < len(p.imports):
				t.Errorf("%s imports %s, which is above it", rel, irel)
			case to < from && tree(irel) != tree(rel):
				t.Errorf("%s's tests import %s, above it in another tree", rel, irel)
			}
		}
	}
}

// The Go client links neither the server side (micro) nor gossip
// (memberlist), and no library package but the registry imports
// membership.
func TestClientLinksNoServerOrGossip(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/grantor/client").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for dep := range strings.Lines(string(out)) {
		if strings.Contains(dep, "memberlist") || strings.Contains(dep, "nats.go/micro") || strings.Contains(dep, module+"/membership") {
			t.Errorf("grantor/client links %s", strings.TrimSpace(dep))
		}
	}
	for _, p := range goList(t) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")
		switch {
		case rel == "grantor/registry", rel == "membership" || strings.HasPrefix(rel, "membership/"),
			strings.HasPrefix(rel, "cmd/"), strings.HasPrefix(rel, "examples/"):
			continue
		}
		if slices.Contains(p.imports, module+"/membership") {
			t.Errorf("%s imports membership: only grantor/registry (and commands) may", rel)
		}
	}
}

// kvlease/fence links no database driver (fence.SQL is database/sql only:
// users bring theirs), and kvlease/fence/pgtest nothing but the standard
// library.
func TestFenceLinksNoDriver(t *testing.T) {
	for _, c := range []struct {
		pkg     string
		allowed func(dep string) bool
	}{
		{module + "/kvlease/fence", func(dep string) bool {
			return !strings.Contains(dep, "jackc/") && !strings.Contains(dep, "lib/pq") // PostgreSQL drivers
		}},
		{module + "/kvlease/fence/pgtest", func(dep string) bool { return dep == module+"/kvlease/fence/pgtest" }},
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", c.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", c.pkg, err, out)
		}
		for dep := range strings.Lines(string(out)) {
			if dep = strings.TrimSpace(dep); dep != "" && !c.allowed(dep) {
				t.Errorf("%s links %s", c.pkg, dep)
			}
		}
	}
}
