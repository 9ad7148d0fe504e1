package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The migration guide's programs (docs/migrating.md) build: the peers'
// ("```go peer" blocks, which the library's doc test cannot import) and
// dlock's ("```go"), each a whole program, in this module, which has both.
func TestTheMigrationGuidesProgramsBuild(t *testing.T) {
	data, err := os.ReadFile("../docs/migrating.md")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(".", "migrating-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	peers, n := 0, 0
	var cur *strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		switch fence := strings.TrimSpace(line); {
		case cur == nil && (fence == "```go peer" || fence == "```go"):
			cur = &strings.Builder{}
			if fence == "```go peer" {
				peers++
			}
		case cur != nil && fence == "```":
			n++
			prog := filepath.Join(dir, "p"+string(rune('0'+n)))
			if err := os.MkdirAll(prog, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(prog, "main.go"), []byte(cur.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	if peers != 2 || n != 4 {
		t.Fatalf("docs/migrating.md: %d programs, %d of them the peers'; want 4 and 2", n, peers)
	}
	if out, err := exec.Command("go", "vet", "./"+dir+"/...").CombinedOutput(); err != nil {
		t.Fatalf("the guide's programs do not build: %v\n%s", err, out)
	}
}
