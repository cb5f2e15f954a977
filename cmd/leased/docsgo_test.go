package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docsGoFiles are the documents whose ```go blocks are checked.
var docsGoFiles = []string{"../../README.md", "../../docs/fencing.md", "../../docs/advise.md"}

// docsGoImports are the packages a snippet may use without importing them:
// its blocks are fragments, read as statements of a function.
var docsGoImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "time": "time", "sql": "database/sql",
	"nats": "github.com/nats-io/nats.go", "jetstream": "github.com/nats-io/nats.go/jetstream",
	"kvlease": "github.com/leased/leased/kvlease", "fence": "github.com/leased/leased/kvlease/fence",
	"election": "github.com/leased/leased/kvlease/election", "readlease": "github.com/leased/leased/kvlease/readlease",
	"workqueue": "github.com/leased/leased/kvlease/workqueue", "client": "github.com/leased/leased/grantor/client",
}

// docsGoTolerated are the type checker's complaints a fragment cannot
// avoid: the variables it takes from around it (ctx, lease, work, …; but
// not a package's name, kvlease.NoSuchThing) and the ones it leaves for
// the reader to use. Everything else is a mistake
// in the documentation: a wrong argument, a missing option, an API that
// changed.
var docsGoTolerated = regexp.MustCompile(`^(undefined: \w+$|declared and not used|"[^"]+" imported and not used|missing return)`)

// The Go snippets of README.md and docs/ use the API as it is: each block,
// as the body of a function, type-checks against the module's packages
// except for names it takes from around it. README's fence.OpenKV call had
// a stray argument that did not compile.
func TestDocsGoSnippetsTypeCheck(t *testing.T) {
	fset := token.NewFileSet()
	type snippet struct {
		where string // document and line
		file  *ast.File
	}
	var snippets []snippet
	paths := make(map[string]bool)
	blockRe := regexp.MustCompile("(?s)\n```go\n(.*?)\n```")
	for _, doc := range docsGoFiles {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range blockRe.FindAllSubmatchIndex(b, -1) {
			line := 1 + strings.Count(string(b[:m[2]]), "\n")
			body := string(b[m[2]:m[3]])
			var imports, stmts []string
			for l := range strings.Lines(body) {
				if strings.HasPrefix(l, "import ") {
					imports = append(imports, strings.TrimSpace(l))
				} else {
					stmts = append(stmts, l)
				}
			}
			for name, path := range docsGoImports {
				if regexp.MustCompile(`\b` + name + `\.`).MatchString(body) {
					imports = append(imports, "import "+name+" "+`"`+path+`"`)
				}
			}
			slices.Sort(imports)
			src := "package snippet\n" + strings.Join(imports, "\n") + "\nfunc _() error {\n" + strings.Join(stmts, "") + "\nreturn nil\n}\n"
			f, err := parser.ParseFile(fset, "snippet.go", src, 0) // positions are the wrapped block's
			if err != nil {
				t.Errorf("%s:%d: the block does not parse: %v", doc, line, err)
				continue
			}
			for _, is := range f.Imports {
				paths[strings.Trim(is.Path.Value, `"`)] = true
			}
			snippets = append(snippets, snippet{fmt.Sprintf("%s, the go block at line %d", doc, line), f})
		}
	}
	imp := exportImporter(t, fset, slices.Sorted(maps.Keys(paths)))
	for _, sn := range snippets {
		var bad []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			if te, ok := err.(types.Error); !ok || !docsGoTolerated.MatchString(te.Msg) {
				bad = append(bad, err.Error())
			}
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{sn.file}, nil)
		if len(bad) > 0 {
			t.Errorf("%s:\n%s", sn.where, strings.Join(bad, "\n"))
		}
	}
}

// exportImporter imports paths and what they import from the compiler's
// export data, which one `go list -export` call builds (or finds in the
// build cache). The "source" importer type-checked every package again
// from source, asking `go list` about each: 70 s alone, 130 s under -race.
func exportImporter(t *testing.T, fset *token.FileSet, paths []string) types.Importer {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.Bytes())
	}
	exports := make(map[string]string)
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err != nil {
			t.Fatalf("go list -export: %v", err)
		}
		exports[p.ImportPath] = p.Export
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if f := exports[path]; f != "" {
			return os.Open(f)
		}
		return nil, fmt.Errorf("no export data for %q", path)
	})
}
