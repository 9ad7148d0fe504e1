package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// helpOf returns what `dlock args... --help` prints.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := exec.Command(bin, append(args, "--help")...).CombinedOutput()
	return string(out)
}

// The command reference (docs/command.md) names every subcommand, every
// flag of each and no flag it lacks, every exit code, and every JSON field
// the command prints.
func TestTheCommandReferenceMatchesTheBinary(t *testing.T) {
	data, err := os.ReadFile("../../docs/command.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	top := helpOf(t)
	commands := strings.Split(strings.SplitN(top, "Commands:\n", 2)[1], "\n\n")[0]
	flagLine := regexp.MustCompile(`(?m)^  --([a-z-]+)`)
	documented := regexp.MustCompile("(?m)^- `--([a-z-]+)")
	n := 0
	for _, line := range strings.Split(commands, "\n") {
		sub := strings.Fields(line)[0]
		_, section, ok := strings.Cut(doc, "\n### dlock "+sub+"\n")
		if !ok {
			t.Errorf("docs/command.md has no section ### dlock %s", sub)
			continue
		}
		section, _, _ = strings.Cut(section, "\n### ")
		has := map[string]bool{}
		for _, m := range flagLine.FindAllStringSubmatch(helpOf(t, sub), -1) {
			has[m[1]] = true
			if !strings.Contains(section, "`--"+m[1]) {
				t.Errorf("dlock %s --%s is not in its section of docs/command.md", sub, m[1])
			}
		}
		for _, m := range documented.FindAllStringSubmatch(section, -1) {
			if !has[m[1]] {
				t.Errorf("docs/command.md documents dlock %s --%s, which the binary does not have", sub, m[1])
			}
		}
		n++
	}
	if n < 10 {
		t.Fatalf("only %d subcommands in dlock --help", n)
	}
	codes := strings.SplitN(top, "Exit codes:", 2)[1]
	for _, code := range regexp.MustCompile(`\b\d+\b`).FindAllString(codes, -1) {
		if !regexp.MustCompile(`(?m)^\| [^|]*\b` + code + `\b[^|]*\|`).MatchString(doc) {
			t.Errorf("exit code %s is not in the table of docs/command.md", code)
		}
	}
	files, _ := filepath.Glob("*.go")
	files = append(files, "../../internal/torture/check.go")
	tag := regexp.MustCompile(`json:"([a-z_]+)`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range tag.FindAllStringSubmatch(string(src), -1) {
			if !strings.Contains(doc, "`"+m[1]+"`") {
				t.Errorf("the JSON field %q (%s) is not in docs/command.md", m[1], f)
			}
		}
	}
}
