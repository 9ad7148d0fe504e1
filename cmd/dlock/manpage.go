package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// manpageMain prints dlock(1), the manual page, in roff: the general usage
// and each subcommand's --help, as the command prints them, so that the
// page says what the binary does (make dist puts it in the Debian
// package). A hidden command, as torture-worker is: `dlock manpage`.
func manpageMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		return usageError(stderr, "manpage: unexpected arguments %q", args)
	}
	v, _, date, _ := buildVersion()
	if len(date) >= 10 {
		date = date[:10] // the commit's day: the same page for the same commit
	}
	var top bytes.Buffer
	usage(&top)
	name, rest, _ := strings.Cut(top.String(), "\n")
	fmt.Fprintf(stdout, ".TH DLOCK 1 %q %q \"dlock manual\"\n", date, "dlock "+v)
	fmt.Fprintf(stdout, ".SH NAME\ndlock \\- %s\n", roff(strings.TrimPrefix(name, "dlock: ")))
	fmt.Fprintf(stdout, ".SH SYNOPSIS\n.B dlock\n.I COMMAND\n[flags] [args]\n")
	fmt.Fprintf(stdout, ".SH DESCRIPTION\n.nf\n%s\n.fi\n.SH COMMANDS\n", roff(strings.TrimSpace(rest)))
	for _, c := range commands {
		fmt.Fprintf(stdout, ".SS dlock %s\n.nf\n%s\n.fi\n", c.name, roff(strings.TrimSpace(helpText(c))))
	}
	fmt.Fprintf(stdout, ".SH SEE ALSO\nhttps://github.com/dlock-go/dlock (docs/command.md)\n")
	return exitOK
}

// roff escapes text for a roff no-fill block: backslashes, and a leading
// dot or quote, which roff would read as a request.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, ".") || strings.HasPrefix(l, "'") {
			lines[i] = `\&` + l
		}
	}
	return strings.Join(lines, "\n")
}
