package dlock_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A program that imports only the library gets go-redis and what the
// library's own tests need, nothing that the command (miniredis) or the
// metrics adapter (the Prometheus client) need: they are modules of their
// own (see go.work).
func TestALibraryUsersModuleGraphHasNeitherMiniredisNorPrometheus(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/user\n\ngo 1.26.0\n\n"+
		"require github.com/dlock-go/dlock v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/dlock-go/dlock => "+root+"\n")
	write("main.go", "package main\n\nimport _ \"github.com/dlock-go/dlock\"\n\nfunc main() {}\n")
	run := func(args ...string) string {
		cmd := exec.Command(goCmd, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	all := run("list", "-m", "all")
	for _, heavy := range []string{"miniredis", "prometheus", "opentelemetry"} {
		if strings.Contains(all, heavy) {
			t.Errorf("go list -m all of a module importing only dlock lists %s:\n%s", heavy, all)
		}
	}
	if !strings.Contains(all, "github.com/redis/go-redis/v9") {
		t.Errorf("go list -m all does not list go-redis:\n%s", all)
	}
}
