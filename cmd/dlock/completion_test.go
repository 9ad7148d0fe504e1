package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// completionScript writes `dlock completion SHELL` to a file and returns
// its path.
func completionScript(t *testing.T, shell string) string {
	t.Helper()
	code, out, stderr := run(t, "completion", shell)
	if code != 0 || out == "" {
		t.Fatalf("dlock completion %s: exit %d, %s", shell, code, stderr)
	}
	path := filepath.Join(t.TempDir(), "dlock."+shell)
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// needShell skips the test where the shell is missing, unless the run
// requires it (make test installs zsh and fish).
func needShell(t *testing.T, shell string) {
	t.Helper()
	if _, err := exec.LookPath(shell); err != nil {
		if os.Getenv("DLOCK_REQUIRE_SHELLS") != "" {
			t.Fatalf("%s is not installed", shell)
		}
		t.Skipf("%s is not installed", shell)
	}
}

// Sourced in bash, the completion completes `dlock ru<TAB>` to run, a
// subcommand's flags from its --help, and nothing unknown.
func TestBashCompletesSubcommandsAndTheirFlags(t *testing.T) {
	t.Parallel()
	needShell(t, "bash")
	script := completionScript(t, "bash")
	for line, want := range map[string]string{
		"dlock ru":                   "run",
		"dlock run --ke":             "--key",
		"dlock status --j":           "--json",
		"dlock completion z":         "zsh",
		"dlock help ru":              "run",
		"dlock --vers":               "--version",
		"dlock run --key k -- ls --": "", // CMD's own flags: not dlock's
		"dlock vers":                 "version",
	} {
		words := strings.Fields(line)
		if strings.HasSuffix(line, " ") {
			words = append(words, "")
		}
		prog := `source "$1"; COMP_WORDS=(` + strings.Join(quoteAll(words), " ") + `); COMP_CWORD=$((${#COMP_WORDS[@]}-1)); _dlock; echo "${COMPREPLY[*]}"`
		out, err := exec.Command("bash", "-c", prog, "bash", script).CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != want {
			t.Errorf("%q<TAB>: %q (%v), want %q", line, got, err, want)
		}
	}
}

func quoteAll(words []string) []string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = "'" + w + "'"
	}
	return q
}

// fish completes the subcommands with their summaries, and their flags.
func TestFishCompletesSubcommandsAndTheirFlags(t *testing.T) {
	t.Parallel()
	needShell(t, "fish")
	script := completionScript(t, "fish")
	out, err := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C "dlock ru"; complete -C "dlock run --ke"`, script).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "run\trun a command while holding a lock") || !strings.Contains(string(out), "--key\t") {
		t.Fatalf("fish: %v\n%s", err, out)
	}
}

// zsh completes `dlock ru<TAB>` to run on the first TAB, with the script
// installed as the package installs it (autoloaded from $fpath by compinit),
// in an interactive zsh driven through a pseudo-terminal (zpty).
func TestZshCompletesOnTheFirstTab(t *testing.T) {
	t.Parallel()
	needShell(t, "zsh")
	dir := t.TempDir()
	code, out, _ := run(t, "completion", "zsh")
	if code != 0 || os.WriteFile(filepath.Join(dir, "_dlock"), []byte(out), 0o644) != nil {
		t.Fatal("dlock completion zsh")
	}
	script := `zmodload zsh/zpty
zpty -b z zsh -f -i
zpty -w z "PS1='> '; fpath=(` + dir + ` \$fpath); autoload -U compinit; compinit -u -D; dlock() { :; }"
zpty -n -w z $'dlock ru\t'
out=""
for i in {1..300}; do # until it shows, for 30 s at most
	while zpty -r -t z line; do out+=$line; done
	[[ $out == *"dlock run"* ]] && break
	sleep 0.1
done
zpty -d z
print -r -- "$out"
`
	got, err := exec.Command("zsh", "-f", "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(got), "dlock run") {
		t.Fatalf("zsh: dlock ru<TAB> did not complete to dlock run: %v\n%q", err, got)
	}
}

// An unknown or missing shell is a usage error.
func TestCompletionOfAnUnknownShellIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"completion"}, {"completion", "tcsh"}, {"completion", "bash", "zsh"}} {
		if code, _, stderr := run(t, args...); code != exitUsage || !strings.Contains(stderr, "bash, zsh or fish") {
			t.Errorf("dlock %v: exit %d, %q; want %d naming the shells", args, code, stderr, exitUsage)
		}
	}
}

// The manual page is roff that man renders, with every subcommand's
// section, and the version.
func TestTheManualPageHasEverySubcommand(t *testing.T) {
	t.Parallel()
	code, page, stderr := run(t, "manpage")
	if code != 0 || !strings.HasPrefix(page, ".TH DLOCK 1 ") {
		t.Fatalf("dlock manpage: exit %d, %q", code, stderr)
	}
	for _, c := range commands {
		if !strings.Contains(page, "\n.SS dlock "+c.name+"\n.nf\nUsage: dlock "+c.name) {
			t.Errorf("the manual page has no section for dlock %s", c.name)
		}
	}
	if _, err := exec.LookPath("groff"); err != nil {
		return
	}
	cmd := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("groff warns about the page: %v\n%s", err, out)
	}
}
