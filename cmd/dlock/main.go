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
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/redis/go-redis/v9"
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
		{"version", "print dlock's version and the Go version it was built with", versionMain},
	}
}

func main() {
	// go-redis logs reconnection attempts; dlock reports failures itself.
	redis.SetLogger(quiet{})
	os.Exit(dispatch(os.Args[1:], os.Stdout, os.Stderr))
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
		if len(args) > 1 {
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
	fmt.Fprintf(stderr, "dlock: unknown command %q\n\n", masked(args[0])) // it may be a misplaced --redis URL
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "dlock: distributed locks on Redis")
	fmt.Fprintln(w, "\nUsage: dlock COMMAND [flags] [args]    (dlock --version: the version)")
	fmt.Fprintln(w, "\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
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

// newFlagSet returns a flag set for subcommand name. --help prints the
// synopsis, help, the flags and the examples; a bad flag prints only the
// flag package's one-line error and a hint to --help.
func newFlagSet(name, synopsis, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Run 'dlock %s --help' for its flags and examples.\n", name)
	}
	helps[fs] = func(out io.Writer) {
		fmt.Fprintf(out, "Usage: dlock %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(help))
		printDefaults(fs, out)
	}
	return fs
}

// printDefaults is flag's PrintDefaults, naming what the command's own
// flag types take (a duration) where flag would say only "value".
func printDefaults(fs *flag.FlagSet, w io.Writer) {
	fs.VisitAll(func(f *flag.Flag) {
		var b strings.Builder
		fmt.Fprintf(&b, "  -%s", f.Name)
		name, usage := flag.UnquoteUsage(f)
		switch f.Value.(type) {
		case *durationValue, *waitFlag:
			if name == "value" {
				name = "duration"
			}
		}
		if name != "" {
			b.WriteString(" " + name)
		}
		if b.Len() <= 4 { // a one-letter bool flag: the usage fits beside it
			b.WriteString("\t")
		} else {
			b.WriteString("\n    \t")
		}
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if zero := reflect.New(reflect.TypeOf(f.Value).Elem()).Interface().(flag.Value); f.DefValue != zero.String() {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
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

// parse parses args; it reports the exit code to return when the caller
// should stop (help asked for, or bad flags). Help goes to standard output
// (it was asked for); errors to stderr. Flags may follow the positional
// arguments (dlock status KEY --json), up to a "--", after which everything
// is the command's.
func parse(fs *flag.FlagSet, args []string) (stop bool, code int) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			helps[fs](os.Stdout)
			return true, exitOK
		}
	}
	if err := fs.Parse(interspersed(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, exitOK
		}
		return true, exitUsage
	}
	return false, 0
}

// interspersed moves the flags among args (before any "--") ahead of the
// positional arguments, keeping each flag's value with it, so that the flag
// package, which stops at the first positional argument, sees them all. A
// "--" and what follows stay at the end, as given. A subcommand whose
// positional arguments are a command line (run) has them after "--" or as
// the first non-flag, from which on nothing is moved.
func interspersed(fs *flag.FlagSet, args []string) []string {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || (fs.Name() == "run" && !strings.HasPrefix(a, "-")) {
			positional = append(positional, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	if len(positional) > 0 && positional[0] != "--" && fs.Name() != "run" {
		// The flag package stops at the first positional argument:
		// put a "--" before them only if one of them looks like a flag.
		for _, p := range positional {
			if strings.HasPrefix(p, "-") && p != "-" {
				return append(append(flags, "--"), positional...)
			}
		}
	}
	return append(flags, positional...)
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// usageError prints a usage problem and returns exitUsage.
func usageError(stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "dlock: "+format+"\n", args...)
	return exitUsage
}
