package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	flag "github.com/spf13/pflag"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/owner"
)

const statusHelp = `
Show whether the lock on KEY is held, for how much longer, the last fence
issued for it, and how many Lock calls are queued for it. The holder is
named by the first characters of its token only.

Exit codes: 0 held; 1 not held; 69 Redis unavailable; 64 usage.

Examples:
  dlock status nightly-report
  dlock status --json nightly-report
  if dlock status deploy >/dev/null; then echo "a deploy is running"; fi
`

// statusResult is what status and ls print with --json.
type statusResult struct {
	Key     string        `json:"key"`
	Held    bool          `json:"held"`
	TTLms   int64         `json:"ttl_ms,omitempty"`
	Fence   int64         `json:"fence"`
	Holder  string        `json:"holder,omitempty"`
	Waiters int           `json:"waiters"`
	Holders int           `json:"holders"`
	Kind    string        `json:"kind,omitempty"`
	Mode    string        `json:"mode,omitempty"`
	Permits int           `json:"permits,omitempty"`
	Leader  string        `json:"leader,omitempty"`
	Owners  []ownerResult `json:"owners,omitempty"`
}

// ownerResult is a hold's owner record (dlock.Owner) in status's JSON.
type ownerResult struct {
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Program string    `json:"program,omitempty"`
	Label   string    `json:"label,omitempty"`
	Holder  string    `json:"holder_prefix,omitempty"`
	Since   time.Time `json:"since"`
	HeldMS  int64     `json:"held_ms"`
}

func toResult(st dlock.Status) statusResult {
	r := statusResult{Key: st.Key, Held: st.Held, TTLms: st.TTL.Milliseconds(), Fence: st.Fence, Holder: st.Holder, Waiters: st.Waiters, Holders: st.Holders, Kind: st.Kind, Mode: st.Mode, Permits: st.Permits, Leader: st.Leader}
	for _, o := range st.Owners {
		r.Owners = append(r.Owners, ownerResult{Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label, Holder: o.Holder,
			Since: o.Since, HeldMS: time.Since(o.Since).Milliseconds()})
	}
	return r
}

// commandOwner is the owner record the command leaves beside its holds:
// this host and process, program, and label (labelFlags.of), its secrets
// masked before it is shortened, so that no part of one is left.
func commandOwner(program, label string) dlock.Option {
	label = owner.Redact(label)
	if len(label) > 200 {
		label = label[:200] + "…"
	}
	return dlock.WithOwner(dlock.Owner{Program: program, Label: label})
}

// labelFlags are run's and elect's --label and --label-args: what the
// owner record, which anyone who can read the lock can read (status, ls,
// the console, a revocation's audit entry), says the hold is for.
type labelFlags struct {
	text string
	args bool
}

func (l *labelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.text, "label", "", "what the hold is for, as status, ls and the console show it (default: CMD's name, without its arguments)")
	fs.BoolVar(&l.args, "label-args", false, "label the hold with CMD and its arguments, user:PASSWORD@ and the values of secret-named NAME=, --name= and \"name\": masked")
}

// of returns the label for a hold that runs cmdArgs: --label, else CMD
// with its arguments for --label-args, else CMD's name alone. Arguments
// stay out unless asked for: a password given as an argument of its own
// cannot be told from any other (owner.Redact masks only those it can
// recognise).
func (l labelFlags) of(cmdArgs []string) string {
	switch {
	case l.text != "":
		return l.text
	case l.args:
		return strings.Join(cmdArgs, " ")
	case len(cmdArgs) > 0:
		return filepath.Base(cmdArgs[0])
	}
	return ""
}

// owners is the human lines of st's owner records, each on a line of its own.
func owners(st dlock.Status) string {
	var b strings.Builder
	for _, o := range st.Owners {
		fmt.Fprintf(&b, "\n  %s: %s pid %d, %s", o.Holder, o.Host, o.PID, o.Program)
		if o.Label != "" {
			fmt.Fprintf(&b, " %q", o.Label)
		}
		fmt.Fprintf(&b, ", held %v", time.Since(o.Since).Round(100*time.Millisecond))
	}
	return b.String()
}

// describe is the human line for a lock's status.
func describe(st dlock.Status) string {
	waiting := ""
	if st.Waiters > 0 {
		waiting = fmt.Sprintf(", %d waiting", st.Waiters)
	}
	if !st.Held {
		return fmt.Sprintf("%s: free, last fence %d%s", st.Key, st.Fence, waiting)
	}
	ttl := st.TTL.Round(time.Millisecond).String()
	if st.TTL < 0 {
		ttl = "none (set without expiry)"
	}
	switch st.Kind {
	case "semaphore":
		return fmt.Sprintf("%s: semaphore, %d of %d permits taken (%s, …), longest ttl %s, fence %d%s", st.Key, st.Holders, st.Permits, st.Holder, ttl, st.Fence, waiting) + owners(st)
	case "rwmutex":
		if st.Mode == "read" {
			return fmt.Sprintf("%s: read-write lock, %d readers (%s, …), longest ttl %s, fence %d%s", st.Key, st.Holders, st.Holder, ttl, st.Fence, waiting) + owners(st)
		}
		return fmt.Sprintf("%s: read-write lock, written by %s, ttl %s, fence %d%s", st.Key, st.Holder, ttl, st.Fence, waiting) + owners(st)
	case "election":
		return fmt.Sprintf("%s: election, led by %q (%s), ttl %s, term %d%s", st.Key, st.Leader, st.Holder, ttl, st.Fence, waiting) + owners(st)
	}
	return fmt.Sprintf("%s: held by %s, ttl %s, fence %d%s", st.Key, st.Holder, ttl, st.Fence, waiting) + owners(st)
}

func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("status", "[flags] KEY", statusHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "status: give exactly one KEY")
	}
	key := fs.Arg(0)
	c, _, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := c.Inspect(ctx, key)
	if err != nil {
		return redisFailed(stderr, "status", key, err)
	}
	if *asJSON {
		printJSON(stdout, toResult(st))
	} else {
		fmt.Fprintln(stdout, describe(st))
	}
	if !st.Held {
		return exitFree
	}
	return exitOK
}

const lsHelp = `
List the locks whose keys match PATTERN (a Redis glob, as in SCAN MATCH;
default '*', every key, as for doctor and the console), with their holders,
TTLs, fences and waiters. Keys are found with SCAN, never KEYS, so a large
database is not blocked. Only dlock's locks are listed: a key with a fence
counter or a queue of dlock's beside it, or a semaphore's or read-write
lock's holders; other keys that match (a cache entry, a lock of another
library's) and dlock's own bookkeeping keys (dlock:*) are left out.

With Redlock, the nodes that answer are listed and those that do not are
named on stderr.

Exit codes: 0 listed (even none, or only from the nodes that answered); 69
no node answered; 64 usage.

Examples:
  dlock ls
  dlock ls 'lock:*'
  dlock ls --json 'job:*' | jq 'select(.held)'
`

func lsMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ls", "[flags] [PATTERN]", lsHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per lock")
	limit := fs.Int("limit", 1000, "list at most this many keys")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 1 {
		return usageError(stderr, "ls: give at most one PATTERN")
	}
	pattern := defaultPattern
	if fs.NArg() == 1 {
		pattern = fs.Arg(0)
	}
	if *limit <= 0 {
		return usageError(stderr, "ls: --limit must be positive")
	}
	c, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	keys, answered := scanNodes(ctx, rdbs, pattern, *limit, stderr)
	if !answered {
		return exitRedis
	}
	for _, k := range keys {
		st, err := c.Inspect(ctx, k)
		if err != nil && (strings.Contains(err.Error(), "WRONGTYPE") || errors.Is(err, dlock.ErrWrongKind)) {
			continue // a key of another type that matches: not a lock
		}
		if err != nil {
			// Too few nodes answered for this key: say so, go on.
			fmt.Fprintf(stderr, "dlock: ls %q: %v\n", k, err)
			continue
		}
		if !st.IsDlock() {
			continue
		}
		if *asJSON {
			printJSON(stdout, toResult(st))
		} else {
			fmt.Fprintln(stdout, describe(st))
		}
	}
	if len(keys) == *limit {
		fmt.Fprintf(stderr, "dlock: ls: stopped at --limit %d keys\n", *limit)
	}
	return exitOK
}

// scanNodes returns up to limit keys that match pattern, dlock's own
// bookkeeping keys left out, from every node: each may know keys the
// others do not (Redlock), so it is the union of what the nodes that
// answer hold; those that do not are named on stderr. answered is false
// when none did.
func scanNodes(ctx context.Context, rdbs []*redis.Client, pattern string, limit int, stderr io.Writer) (keys []string, answered bool) {
	seen := map[string]bool{}
	for _, rdb := range rdbs {
		iter := rdb.Scan(ctx, 0, pattern, 100).Iterator()
		for iter.Next(ctx) && len(keys) < limit {
			k := iter.Val()
			if strings.HasPrefix(k, "dlock:") || seen[k] {
				continue
			}
			seen[k] = true
			keys = append(keys, k)
		}
		if err := iter.Err(); err != nil {
			fmt.Fprintf(stderr, "dlock: ls: node %s did not answer: %v\n", rdb.Options().Addr, err)
			continue
		}
		answered = true
	}
	return keys, answered
}

// defaultPattern is the PATTERN of ls and doctor when none is given: every
// key, as the console's. A lock's name need not say "lock" (backup,
// deploy), and both already tell dlock's locks from other keys.
const defaultPattern = "*"
