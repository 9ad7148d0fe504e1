package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionHelp = `
Print dlock's version, the commit and the commit's date it was built from,
and the Go version it was built with, all read from the build information:
the version 'go install' fetched (v0.1.0 for
'go install github.com/dlock-go/dlock/cmd/dlock@v0.1.0'), the one 'make dist'
stamps (git describe), or "(devel)" for a plain build in a work tree. A
build from a work tree with changes not committed says "modified".
'dlock --version' does the same.

Exit codes: 0; 64 usage.

Examples:
  dlock version
  dlock --version
`

// version, commit and date are set by the release build (make dist: -X
// main.version=...), the version from git describe, the commit and its
// date for a build that has no VCS information from Go (in a git
// worktree, whose .git is a file); empty otherwise, when the build
// information says them.
var version, commit, date string

func versionMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "", versionHelp, stderr)
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "version: unexpected arguments %q", fs.Args())
	}
	fmt.Fprintln(stdout, versionLine())
	return exitOK
}

// versionLine is "dlock VERSION (commit C, DATE[, modified]; GO)", the
// commit and date left out when the build has no VCS information (a build
// from the module proxy's zip has none).
func versionLine() string {
	v, rev, at, modified := buildVersion()
	vcs := ""
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		vcs = "commit " + rev + ", " + at
		if modified {
			vcs += ", modified"
		}
		vcs += "; "
	}
	return fmt.Sprintf("dlock %s (%s%s)", v, vcs, runtime.Version())
}

// buildVersion reads the version, the commit, its date and whether the
// tree was modified from the build information (and the stamped version).
func buildVersion() (v, rev, at string, modified bool) {
	v, rev, at = "(devel)", commit, date
	bi, ok := debug.ReadBuildInfo()
	if ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	if version != "" {
		v = version
	}
	if !ok {
		return v, rev, at, false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return v, rev, at, modified
}
