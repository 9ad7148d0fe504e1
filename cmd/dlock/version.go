package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionHelp = `
Print dlock's version, as the Go module system knows it (the version 'go
install' fetched, or "(devel)" for a build from a work tree), and the Go
version it was built with. 'dlock --version' does the same.

Exit codes: 0; 64 usage.

Examples:
  dlock version
  dlock --version
`

func versionMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("version", "", versionHelp, stderr)
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "version: unexpected arguments %q", fs.Args())
	}
	fmt.Fprintf(stdout, "dlock %s (%s)\n", moduleVersion(), runtime.Version())
	return exitOK
}

// moduleVersion is the main module's version in the build information, or
// "(devel)" when there is none.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
