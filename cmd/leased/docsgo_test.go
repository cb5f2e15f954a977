package main_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
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
	imp := importer.ForCompiler(fset, "source", nil)
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
			var bad []string
			conf := types.Config{Importer: imp, Error: func(err error) {
				if te, ok := err.(types.Error); !ok || !docsGoTolerated.MatchString(te.Msg) {
					bad = append(bad, err.Error())
				}
			}}
			_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
			if len(bad) > 0 {
				t.Errorf("%s, the go block at line %d:\n%s", doc, line, strings.Join(bad, "\n"))
			}
		}
	}
}
