// Command dlock runs commands under a distributed lock on Redis, gives shell
// scripts lock tools, and reproduces the Redis guidance's lock experiments.
//
//	dlock run --key NAME [--redis URL]... [--ttl 30s] [--wait D] [--max-hold D] -- CMD ARGS...
//	dlock lock --key NAME [--ttl 30s] [--wait D] [--json]
//	dlock unlock --key NAME --token T [--json]
//	dlock extend --key NAME --token T --ttl D [--json]
//	dlock elect --key NAME [--value V] [--ttl 30s] [--wait D] -- CMD ARGS...
//	dlock leader [--json] [--watch] NAME
//	dlock status [--json] KEY
//	dlock ls [--json] [PATTERN]
//	dlock doctor [--json] [PATTERN]
//	dlock demo [--redis URL] [--spawn]
//	dlock torture [--quick] [--scenario NAME] [--report DIR]
//	dlock version
//
// Run `dlock help` or `dlock COMMAND --help` for details and examples.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
	flag "github.com/spf13/pflag"
)

// Exit codes. They are part of the interface: scripts test for them, and
// usage and the table of docs/command.md document every one (a test holds them
// together).
const (
	exitOK          = 0
	exitFree        = 1   // status: the lock is not held; leader: nobody leads; doctor: findings; demo, torture: a failure
	exitUsage       = 64  // bad flags or arguments (EX_USAGE)
	exitRedis       = 69  // Redis unreachable, or it refused (EX_UNAVAILABLE)
	exitSoftware    = 70  // an internal error: CMD's status unreadable, torture's run broke (EX_SOFTWARE)
	exitConflict    = 75  // not obtained: someone else holds the lock (EX_TEMPFAIL); --conflict-exit-code changes it
	exitLost        = 76  // the lock was lost while the command ran, or is not held by this token
	exitNotRunnable = 126 // CMD could not be run
	exitNoExec      = 127 // CMD was not found
	exitSignalled   = 128 // plus N: CMD was killed by signal N (as a shell says)
	exitInterrupted = 130 // a signal (SIGINT, SIGTERM, SIGHUP) ended the wait for a lock or an election
)

// command is one subcommand.
type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{"run", "run a command while holding a lock", runMain},
		{"lock", "obtain a lock and print its token and fence (for shell scripts)", lockMain},
		{"unlock", "release a lock obtained with `dlock lock`", unlockMain},
		{"extend", "extend a lock obtained with `dlock lock`", extendMain},
		{"elect", "campaign for leadership and run a command while leader", electMain},
		{"leader", "show who leads an election (--watch: and each change)", leaderMain},
		{"status", "show whether a lock is held, its TTL, fence and waiters", statusMain},
		{"ls", "list the locks matching a pattern (SCAN, never KEYS)", lsMain},
		{"doctor", "audit a Redis for the guidance's lock mistakes (read-only)", doctorMain},
		{"ui", "serve the lock console: every lock, holder and waiter, live, in a browser", uiMain},
		{"demo", "reproduce the Redis guidance's lock experiments", demoMain},
		{"torture", "inject faults into real processes and check what holds", tortureMain},
		{"version", "print dlock's version, commit and date, and the Go version it was built with", versionMain},
		{"completion", "print the shell completion script for bash, zsh or fish", completionMain},
	}
}

func main() {
	// go-redis logs reconnection attempts; dlock reports failures itself.
	redis.SetLogger(quiet{})
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
}

// isHelpWord reports whether arg asks for help where a command is named.
func isHelpWord(arg string) bool {
	switch arg {
	case "help", "-h", "-help", "--help":
		return true
	}
	return false
}

// quiet is a go-redis logger that drops everything.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func dispatch(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && !isHelpWord(args[1]) { // help help: the general usage, as help alone
			return dispatch([]string{args[1], "--help"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	case "-version", "--version":
		return versionMain(args[1:], stdout, stderr)
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	if args[0] == "torture-worker" { // torture's client processes
		return workerMain(args[1:], stdout, stderr)
	}
	if args[0] == "run-guard" { // run's guardian of CMD (guard_linux.go)
		return guardMain(args[1:])
	}
	if args[0] == "manpage" { // the manual page, for the Debian package (make dist)
		return manpageMain(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "dlock: unknown command %q\n\n", masked(args[0])) // it may be a misplaced --redis URL
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "dlock: distributed locks on Redis")
	fmt.Fprintln(w, "\nUsage: dlock COMMAND [flags] [args]    (dlock --version: the version)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run 'dlock COMMAND --help' for a command's flags and examples.

Redis: --redis URL (repeat it for Redlock over several masters), default
$DLOCK_REDIS (URLs separated by commas), then redis://127.0.0.1:6379.
URLs: redis://[user:password@]host:port[/db], rediss:// for TLS; in a
password, percent-encode @ : / # ? %% (as %%40 %%3A %%2F %%23 %%3F %%25).

Exit codes: 0 ok; 1 not held (status), nobody leads (leader), findings
(doctor), a failed experiment or scenario (demo, torture); 64 usage; 69
Redis unavailable or refused; 70 internal error; 75 not obtained (someone
else holds the lock; --conflict-exit-code changes it); 76 lock or
leadership lost, or not held by this token; 126/127 command not
runnable/found; 130 interrupted (SIGINT, SIGTERM, SIGHUP) while waiting
(run, elect, lock); otherwise run's or elect's command's own exit status
(128+N when killed by signal N).
`)
}

// newFlagSet returns a flag set for subcommand name, GNU style
// (github.com/spf13/pflag): --key NAME or --key=NAME. --help prints the
// synopsis, help, the flags and the examples; a bad flag prints its error,
// in dlock's words (parse), and a hint to --help.
func newFlagSet(name, synopsis, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // parse reports errors
	helps[fs] = func(out io.Writer) {
		fmt.Fprintf(out, "Usage: dlock %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(help))
		printDefaults(fs, out)
	}
	return fs
}

// printDefaults lists fs's flags as the docs write them, --name TYPE, each
// with its usage and default.
func printDefaults(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		if f.Hidden {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name, _ := flag.UnquoteUsage(f); name != "" {
			b.WriteString(" " + name)
		}
		_, usage := flag.UnquoteUsage(f)
		b.WriteString("\n    \t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if zero := reflect.New(reflect.TypeOf(f.Value).Elem()).Interface().(flag.Value); f.DefValue != zero.String() {
			if f.Value.Type() == "string" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %v)", f.DefValue)
			}
		}
		fmt.Fprintln(w, b.String())
	})
}

// helps holds each flag set's full --help text.
var helps = map[*flag.FlagSet]func(io.Writer){}

// helpOut is where --help prints: standard output, or the buffer of
// helpText, which reads a command's help to generate completions and the
// manual page.
var helpOut io.Writer = os.Stdout

// parse parses args; it reports the exit code to return when the caller
// should stop (help asked for, or bad flags). Help goes to standard output
// (it was asked for); errors to stderr. Flags may follow the positional
// arguments (dlock status KEY --json), up to a "--", after which everything
// is the command's; run's command line begins at its first positional
// argument too, so that CMD's own flags stay CMD's.
func parse(fs *flag.FlagSet, args []string) (stop bool, code int) {
	fs.SetInterspersed(fs.Name() != "run")
	args, help, err := doubleDashed(fs, args)
	if help {
		helps[fs](helpOut)
		return true, exitOK
	}
	if err == nil {
		err = fs.Parse(args)
	}
	if err != nil {
		fmt.Fprintf(fs.Output(), "dlock: %s: %s\nRun 'dlock %s --help' for its flags and examples.\n", fs.Name(), flagError(fs, err), fs.Name())
		return true, exitUsage
	}
	return false, 0
}

// takesCommand reports whether fs's positional arguments are a command to
// run (run's and elect's CMD), whose own flags, -h and --help among them,
// are the command's, never a request for dlock's help.
func takesCommand(fs *flag.FlagSet) bool { return fs.Name() == "run" || fs.Name() == "elect" }

// unknownFlagError is a word that names none of a flag set's flags, as it
// was written (-d stays -d), without its value.
type unknownFlagError struct {
	word, name   string
	afterCommand bool // it follows elect's command's first word: the command's own flag
}

func (e *unknownFlagError) Error() string { return "unknown flag " + e.word }

// doubleDashed returns args with each of fs's flags written with one dash
// (-key), as Go's flag package took them and scripts written for earlier
// dlocks may, written with two (--key): dlock has no one-letter flags for
// "-key" to mean "-k -e -y". It reports help for -h, -help or --help before
// a "--" and, for a command that takes a command (takesCommand), before
// that command's first word. A word that names none of fs's flags is an
// *unknownFlagError, named as written. Flags' values, and what follows
// "--" (or, for run, its first positional argument), are left as they are.
func doubleDashed(fs *flag.FlagSet, args []string) (out []string, help bool, err error) {
	out = make([]string, 0, len(args))
	afterCommand := false // elect's command's first word came before: what follows is the command's
	for i := 0; i < len(args); i++ {
		a := args[i]
		positional := !strings.HasPrefix(a, "-") || a == "-"
		if a == "--" || (positional && fs.Name() == "run") {
			return append(out, args[i:]...), false, nil
		}
		if positional {
			afterCommand = takesCommand(fs)
			out = append(out, a)
			continue
		}
		word, _, hasValue := strings.Cut(a, "=")
		name := strings.TrimLeft(word, "-")
		f := fs.Lookup(name)
		switch {
		case (word == "-h" || name == "help") && !afterCommand:
			return nil, true, nil
		case f == nil:
			return nil, false, &unknownFlagError{word: word, name: name, afterCommand: afterCommand}
		case !strings.HasPrefix(a, "--"):
			a = "-" + a
		}
		out = append(out, a)
		if f.NoOptDefVal == "" && !hasValue && i+1 < len(args) {
			out = append(out, args[i+1]) // the flag's value, whatever it looks like
			i++
		}
	}
	return out, false, nil
}

// flagError says what is wrong with the flags in dlock's words: an
// unknown flag with the nearest one fs has, a value a flag refused.
func flagError(fs *flag.FlagSet, err error) string {
	var unknown *unknownFlagError
	var invalid *flag.InvalidValueError
	var missing *flag.ValueRequiredError
	switch {
	case errors.As(err, &unknown) && unknown.afterCommand:
		return fmt.Sprintf("unknown flag %s: a command goes after --, as in dlock %s --key NAME [flags] -- CMD [ARGS...]", unknown.word, fs.Name())
	case errors.As(err, &unknown):
		if near := nearestFlag(fs, unknown.name); near != "" {
			return fmt.Sprintf("unknown flag %s (did you mean --%s?)", unknown.word, near)
		}
		return err.Error()
	case errors.As(err, &invalid):
		return fmt.Sprintf("invalid value %q for --%s: %v", invalid.GetValue(), invalid.GetFlag().Name, errors.Unwrap(invalid))
	case errors.As(err, &missing):
		return fmt.Sprintf("--%s needs a value", missing.GetSpecifiedName())
	}
	return err.Error()
}

// nearestFlag returns the name of fs's flag nearest to name by edit
// distance (a swap of two letters counts one), or "" if none is near
// enough to be what was meant.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 0
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); !f.Hidden && (best == "" || d < bestD) {
			best, bestD = f.Name, d
		}
	})
	if best == "" || bestD > max(2, len(name)/3) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of adjacent bytes.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// usageError prints a usage problem and returns exitUsage.
func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "dlock: "+format+"\n", args...)
	return exitUsage
}
