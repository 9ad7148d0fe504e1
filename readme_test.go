package dlock_test

import (
	"bufio"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// snippetImports are the packages a README fragment (a block that is not a
// whole file) may use without importing them.
var snippetImports = map[string]string{
	"context": "context", "sql": "database/sql", "errors": "errors", "fmt": "fmt", "log": "log", "slog": "log/slog", "time": "time",
	"redis": "github.com/redis/go-redis/v9", "dlock": "github.com/dlock-go/dlock", "guard": "github.com/dlock-go/dlock/guard",
	"prometheus": "github.com/prometheus/client_golang/prometheus", "dlockprom": "github.com/dlock-go/dlock/prometheus",
	"dlockotel": "github.com/dlock-go/dlock/dlockotel",
}

// Every Go block in the README type-checks against the packages as they
// are: whole programs as they stand, fragments inside a function that
// declares what they assume (ctx, rdb, locks, ...). Unused variables and
// imports, which a fragment cannot avoid, are the only errors allowed.
func TestREADMESnippetsCompile(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(data))
	if len(blocks) < 4 {
		t.Fatalf("found %d Go blocks in the README", len(blocks))
	}
	imp := exportImporter(t)
	for i, b := range blocks {
		src := b
		if !strings.HasPrefix(strings.TrimSpace(b), "package ") {
			src = "package snippet\n\nimport (\n"
			for name, path := range snippetImports {
				src += "\t" + name + " " + `"` + path + `"` + "\n"
			}
			src += ")\n\nfunc _(ctx context.Context, rdb, rdb1, rdb2, rdb3, rdb4, rdb5 *redis.Client, db *sql.DB, job interface{ Run(context.Context) error }) error {\n"
			if !strings.Contains(b, "locks :=") {
				src += "var locks *dlock.Client\n"
			}
			src += b + "\nreturn nil\n}\n"
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "snippet.go", src, 0)
		if err != nil {
			t.Errorf("README Go block %d does not parse: %v\n%s", i+1, err, b)
			continue
		}
		conf := types.Config{Importer: imp, Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && te.Soft && strings.Contains(te.Msg, "not used") {
				return
			}
			t.Errorf("README Go block %d: %v", i+1, err)
		}}
		_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
	}
}

// goBlocks returns the contents of the ```go fences in md.
func goBlocks(md string) []string {
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &strings.Builder{}
		case cur != nil && strings.TrimSpace(line) == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// exportImporter imports packages from the export data the go command
// builds for them (go list -export), so that the check sees the module's
// code and its dependencies' as they are.
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, p := range snippetImports {
		args = append(args, p)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			files[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, errors.New("no export data for " + path)
		}
		return os.Open(file)
	})
}
