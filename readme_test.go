package dlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// snippetImports are the packages a README fragment (a block that is not a
// whole file) may use without importing them.
var snippetImports = map[string]string{
	"context": "context", "sql": "database/sql", "errors": "errors", "fmt": "fmt", "log": "log", "slog": "log/slog", "time": "time",
	"redis": "github.com/redis/go-redis/v9", "dlock": "github.com/dlock-go/dlock", "guard": "github.com/dlock-go/dlock/guard",
	"prometheus": "github.com/prometheus/client_golang/prometheus", "dlockprom": "github.com/dlock-go/dlock/prometheus",
	"dlockotel": "github.com/dlock-go/dlock/dlockotel", "console": "github.com/dlock-go/dlock/console", "http": "net/http",
}

// docFiles are the Markdown files whose Go blocks, links and anchors the
// tests check: the README and the guides.
func docFiles(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob("docs/*.md")
	if err != nil || len(guides) < 10 {
		t.Fatalf("docs/*.md: %d guides, %v", len(guides), err)
	}
	return append([]string{"README.md", "BENCHMARKS.md"}, guides...)
}

// Every Go block in the README and the guides type-checks against the
// packages as they are: whole programs as they stand, fragments inside a
// function that declares what they assume (ctx, rdb, locks, ...). Unused
// variables and imports, which a fragment cannot avoid, are the only
// errors allowed.
func TestDocSnippetsCompile(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	imp := exportImporter(t)
	total := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks := goBlocks(string(data))
		total += len(blocks)
		for i, b := range blocks {
			checkSnippet(t, imp, fmt.Sprintf("%s: Go block %d", file, i+1), b)
		}
	}
	if total < 10 {
		t.Fatalf("found only %d Go blocks in the docs", total)
	}
}

// checkSnippet type-checks one Go block, named what in its errors.
func checkSnippet(t *testing.T, imp types.Importer, what, b string) {
	t.Helper()
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
		t.Errorf("%s does not parse: %v\n%s", what, err, b)
		return
	}
	conf := types.Config{Importer: imp, Error: func(err error) {
		var te types.Error
		if errors.As(err, &te) && te.Soft && strings.Contains(te.Msg, "not used") {
			return
		}
		t.Errorf("%s: %v", what, err)
	}}
	_, _ = conf.Check("snippet", fset, []*ast.File{f}, nil)
}

// Every relative link in the README and the guides names a file that
// exists, and every #anchor a heading of the file it points into.
func TestDocLinksResolve(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(data)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link to %s: %v", file, target, err)
					continue
				}
			}
			if anchor != "" && !hasAnchor(t, dest, anchor) {
				t.Errorf("%s: link to %s: %s has no heading #%s", file, target, dest, anchor)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links checked", checked)
	}
}

// The README is a front door, not a manual: the guides hold the rest.
func TestTheREADMEIsShort(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 250 {
		t.Fatalf("README.md has %d lines; keep it under 250 and move the rest to a guide", n)
	}
}

// links returns the targets of md's Markdown links and images, inline
// ([text](target)) and by reference ([name]: target), outside code.
func links(md string) []string {
	var out []string
	inline := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	ref := regexp.MustCompile(`^\[[^\]]+\]:\s+(\S+)`)
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		line = regexp.MustCompile("`[^`]*`").ReplaceAllString(line, "")
		for _, m := range inline.FindAllStringSubmatch(line, -1) {
			out = append(out, m[1])
		}
		if m := ref.FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// hasAnchor reports whether the Markdown file has a heading whose GitHub
// anchor is anchor.
func hasAnchor(t *testing.T, file, anchor string) bool {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "#") && slug(strings.TrimLeft(line, "# ")) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's anchor for a heading: lower case, spaces to hyphens,
// punctuation other than hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
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

// The README's complete program runs to its end against a real server: it
// does its work under the lock's context and finishes, printing the fence
// (it does not wait for the lease to run out). It is built as it stands,
// but for the server's address, through a build overlay (nothing is
// written into the tree).
func TestTheREADMEsProgramFinishesItsWork(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var program string
	for _, b := range goBlocks(string(data)) {
		if strings.HasPrefix(b, "package main\n") {
			program = b
			break
		}
	}
	if !strings.Contains(program, `"127.0.0.1:6379"`) {
		t.Fatalf("no program with the address 127.0.0.1:6379 in README.md")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(strings.Replace(program, "127.0.0.1:6379", addr(), 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "internal", "readmeprogram", "main.go"): src}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "program")
	if out, err := exec.CommandContext(ctx, "go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "./internal/readmeprogram").CombinedOutput(); err != nil {
		t.Fatalf("building the README's program: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "shipped under fence ") {
		t.Fatalf("the README's program: %v\n%s", err, out)
	}
}

// The README's first commands are a clone's, before the published module's
// go get and go install (which the module proxy refuses until the module is
// published): the make targets it names exist, make demo runs the command's
// demo, each go build it shows builds, and the binary it builds has the
// subcommands the block runs. (The demo itself is not run: its --help is.)
func TestTheREADMEStartsFromAClone(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	_, block, ok := strings.Cut(readme, "```sh\n")
	block, _, _ = strings.Cut(block, "```")
	published := strings.Index(readme, "go get github.com/dlock-go/dlock")
	if !ok || published < 0 || strings.Index(readme, block) >= published {
		t.Fatal("README.md: no shell block of a clone's commands before the published module's go get")
	}
	makefile, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	built := map[string]string{} // the block's binary name -> where the test built it
	var made, ran []string
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		cmd, _, _ := strings.Cut(line, "#")
		f := strings.Fields(cmd)
		switch {
		case len(f) == 2 && f[0] == "make":
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(f[1]) + `:`).Match(makefile) {
				t.Errorf("README.md runs make %s; the Makefile has no such target", f[1])
			}
			made = append(made, f[1])
		case len(f) >= 5 && f[0] == "go" && f[1] == "build" && f[len(f)-3] == "-o":
			out := filepath.Join(dir, filepath.Base(f[len(f)-2]))
			args := append(append([]string{"build"}, f[2:len(f)-3]...), "-o", out, f[len(f)-1])
			if msg, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				t.Fatalf("README.md's %q: %v\n%s", strings.TrimSpace(cmd), err, msg)
			}
			built["./"+f[len(f)-2]] = out
		case len(f) >= 2 && built[f[0]] != "":
			out, err := exec.Command(built[f[0]], append(f[1:], "--help")...).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "Usage: dlock "+strings.Join(f[1:], " ")) {
				t.Errorf("README.md runs %q; %s --help: %v\n%s", strings.TrimSpace(cmd), f[0], err, out)
			}
			ran = append(ran, strings.Join(f, " "))
		default:
			t.Errorf("README.md's clone block: %q is not a command this test knows to check", strings.TrimSpace(cmd))
		}
	}
	_, recipe, _ := strings.Cut(string(makefile), "\ndemo:\n")
	if !slices.Contains(made, "demo") || !slices.Contains(made, "test") || len(ran) == 0 || !strings.Contains(strings.SplitN(recipe, "\n\n", 2)[0], "run ./cmd/dlock demo") {
		t.Fatalf("README.md's clone block: make %v, ran %v; want make demo (which runs ./cmd/dlock demo), make test and the built command", made, ran)
	}
}
