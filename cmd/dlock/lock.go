package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
)

const lockHelp = `
Obtain the lock on NAME and print what a script needs to extend and release
it: its key, token and fence, as shell assignments (or JSON with --json).
The lock is not renewed: extend it with 'dlock extend' before its TTL runs
out, and release it with 'dlock unlock'.

SIGINT, SIGTERM or SIGHUP while it waits (--wait) ends the wait: it leaves
the lock's queue and exits 130, as 'dlock run' does.

Exit codes: 0 obtained; 75 not obtained (see --conflict-exit-code); 130
interrupted (SIGINT, SIGTERM, SIGHUP) while waiting; 69 Redis unavailable;
64 usage. With --json, "result" is obtained, not_obtained (held by someone
else), unavailable (Redis failed or refused), invalid (usage) or
interrupted.

Examples:
  eval "$(dlock lock --key backup --ttl 10m)" || exit 1
  export DLOCK_KEY DLOCK_TOKEN DLOCK_FENCE   # for dlock extend/unlock and the work
  pg_dump ... ; dlock unlock

  dlock lock --key backup --wait 30s --json
`

const unlockHelp = `
Release the lock on NAME if it is still held with TOKEN (as printed by
'dlock lock'). --key and --token default to $DLOCK_KEY and $DLOCK_TOKEN.

Exit codes: 0 released; 76 not held with this token (it expired, and perhaps
someone else holds it now: nothing was changed); 69 Redis unavailable; 64 usage.

Examples:
  dlock unlock --key "$DLOCK_KEY" --token "$DLOCK_TOKEN"
  DLOCK_KEY=backup DLOCK_TOKEN=... dlock unlock --json
`

const extendHelp = `
Reset the TTL of the lock on NAME to the --ttl given, if it is still held
with TOKEN. --key and --token default to $DLOCK_KEY and $DLOCK_TOKEN.

Exit codes: 0 extended; 76 not held with this token (nothing was changed);
69 Redis unavailable; 64 usage.

Examples:
  dlock extend --key "$DLOCK_KEY" --token "$DLOCK_TOKEN" --ttl 10m
  while work_remains; do step; dlock extend --ttl 1m || exit 1; done   # with $DLOCK_KEY/$DLOCK_TOKEN set
`

// lockResult is what lock, unlock and extend print with --json.
type lockResult struct {
	Key    string `json:"key"`
	Token  string `json:"token,omitempty"`
	Fence  int64  `json:"fence,omitempty"`
	TTLms  int64  `json:"ttl_ms,omitempty"`
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
}

func lockMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("lock", "--key NAME [flags]", lockHelp, stderr)
	var (
		rf       redisFlags
		wait     waitFlag
		key      = fs.String("key", "", "lock `NAME` (required)")
		ttl      = durationFlag(fs, "ttl", dlock.DefaultTTL, "lease (not renewed: extend it or lose it)")
		asJSON   = fs.Bool("json", false, "print JSON")
		conflict = fs.Int("conflict-exit-code", exitConflict, "exit code when the lock is held by someone else")
	)
	rf.register(fs)
	wait.set = true // one try unless --wait says otherwise
	fs.Var(&wait, "wait", "how long to wait for the lock (0: one try)")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if *key == "" {
		return usageError(stderr, "lock: --key is required")
	}
	if err := exitCodeOK(*conflict); err != nil {
		return usageError(stderr, "lock: %v", err)
	}
	c, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	if err := firstContact(rdbs); err != nil {
		if *asJSON {
			printJSON(stdout, lockResult{Key: *key, Result: "unavailable", Error: err.Error()})
		}
		return redisFailed(stderr, "cannot lock", *key, err)
	}
	// A signal ends the wait through its context, so that the library
	// leaves the queue (dying by the signal would leave the entry behind
	// until it expires, and print nothing).
	sigs := notifySignals()
	l, err := untilSignalled(context.Background(), sigs, func(ctx context.Context) (*dlock.Lock, error) {
		return acquire(ctx, c, *key, wait, dlock.WithTTL(*ttl), commandOwner("dlock lock", ""))
	})
	// Once the lock is obtained the signals stay caught, and ignored, until
	// the process exits: one that came between printing the token and the
	// exit would kill it, and a script would read "interrupted, nothing
	// held" while the key is held (found by review).
	if err != nil {
		signal.Stop(sigs)
		code := acquireFailed(stderr, *key, err, *conflict)
		if *asJSON {
			printJSON(stdout, lockResult{Key: *key, Result: acquireResult(code, *conflict), Error: err.Error()})
		}
		return code
	}
	if *asJSON {
		printJSON(stdout, lockResult{Key: *key, Token: l.Token(), Fence: l.Fence(), TTLms: ttl.Milliseconds(), Result: "obtained"})
	} else {
		fmt.Fprintf(stdout, "DLOCK_KEY=%s\nDLOCK_TOKEN=%s\nDLOCK_FENCE=%d\n", shellQuote(*key), l.Token(), l.Fence())
	}
	return exitOK
}

// acquireResult is --json's result for acquireFailed's exit code: a broken
// server is never reported as a held lock.
func acquireResult(code, conflict int) string {
	switch code {
	case conflict:
		return "not_obtained"
	case exitUsage:
		return "invalid"
	case exitInterrupted:
		return "interrupted"
	}
	return "unavailable"
}

func unlockMain(args []string, stdout, stderr io.Writer) int {
	return tokenCommand("unlock", unlockHelp, args, stdout, stderr, func(ctx context.Context, l *dlock.Lock, _ time.Duration) error {
		return l.Unlock(ctx)
	})
}

func extendMain(args []string, stdout, stderr io.Writer) int {
	return tokenCommand("extend", extendHelp, args, stdout, stderr, func(ctx context.Context, l *dlock.Lock, ttl time.Duration) error {
		return l.Extend(ctx, ttl)
	})
}

// tokenCommand runs unlock or extend: act on the lock that key holds with
// token.
func tokenCommand(name, help string, args []string, stdout, stderr io.Writer, act func(context.Context, *dlock.Lock, time.Duration) error) int {
	fs := newFlagSet(name, "--key NAME --token T [flags]", help, stderr)
	var (
		rf     redisFlags
		key    = fs.String("key", "", "lock `NAME` (default $DLOCK_KEY)")
		token  = fs.String("token", "", "the lock's `TOKEN`, as printed by 'dlock lock' (default $DLOCK_TOKEN)")
		asJSON = fs.Bool("json", false, "print JSON")
		ttl    *time.Duration
	)
	if name == "extend" {
		ttl = durationFlag(fs, "ttl", 0, "new TTL (required)")
	} else {
		ttl = new(time.Duration)
	}
	rf.register(fs)
	if stop, code := parse(fs, args); stop {
		return code
	}
	if *key == "" {
		*key = os.Getenv("DLOCK_KEY")
	}
	if *token == "" {
		*token = os.Getenv("DLOCK_TOKEN")
	}
	switch {
	case *key == "":
		return usageError(stderr, "%s: --key is required (or $DLOCK_KEY)", name)
	case *token == "":
		return usageError(stderr, "%s: --token is required (or $DLOCK_TOKEN)", name)
	case name == "extend" && *ttl == 0:
		return usageError(stderr, "extend: --ttl is required")
	case len(fs.Args()) > 0:
		return usageError(stderr, "%s: unexpected arguments %q", name, fs.Args())
	}
	c, _, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Attach(ctx, *key, *token)
	if err == nil {
		err = act(ctx, l, *ttl)
	}
	code, result := exitOK, map[string]string{"unlock": "released", "extend": "extended"}[name]
	switch {
	case err == nil:
	case errors.Is(err, dlock.ErrInvalidArgument):
		code, result = exitUsage, "invalid"
		fmt.Fprintln(stderr, err)
	case errors.Is(err, dlock.ErrNotHeld):
		code, result = exitLost, "not_held"
		fmt.Fprintf(stderr, "dlock: %q is not held with this token (nothing changed)\n", *key)
	default:
		code, result = redisFailed(stderr, name, *key, err), "unavailable"
		if code == exitUsage {
			result = "invalid"
		}
	}
	if *asJSON {
		r := lockResult{Key: *key, Result: result}
		if err != nil {
			r.Error = err.Error()
		}
		if name == "extend" && err == nil {
			r.TTLms = ttl.Milliseconds()
		}
		printJSON(stdout, r)
	}
	return code
}

func printJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
