package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/doctor"
)

const doctorHelp = `
Audit a live Redis for the mistakes in the troubleshooting table that ends
the Redis guidance on locks, read-only: SCAN with TYPE (never KEYS), PTTL,
GET, ZRANGE, HGET, TIME and CONFIG GET; nothing is written. PATTERN
(default '*', every key, as for ls) selects the keys to audit, dlock's or
anyone's; dlock's own keys (dlock:*) are read for what they say about the
locks.

A string key that matches is audited as a lock only if it is one: dlock's
(a fence counter or a wait queue of dlock's beside it), or a hand-written
lock by its look. Its name: a word of it (split at punctuation, digits and
camelCase, any case) is lock, locks, mutex or mtx, or ends in lock
(report_lock, jobLock, lock:42, mylock, ORDERLOCK; not block, clock,
unlock, nolock, deadlock, gridlock, padlock, airlock, sherlock and the
like, nor locked: user:1:locked is an account's state). AND its value: a
token or owner id (one word, 16 characters or more, or with a digit: a
random string, a UUID, host:pid; not on, off, open, never), a Unix
time in s or ms, whole or fractional (the old SETNX recipe's expiry,
Python's time.time()+ttl), or a JSON object with an owner, holder, token
or locked_by field, or an until, expires or deadline field that is a Unix
time (not expiresIn: 30). A flag (1, true, yes, locked, held,
taken, busy) counts only when a segment of the name between ':', '.' or
'/' is one such word alone (lock:x, jobs:lock, mylock:report; not
settings:1:screen_lock). Other keys, a counter, a setting or a cache entry
without expiry, are the user's data and left alone. Each finding says
which rule picked its keys (basis).

Each finding names the table's row, the keys (values shortened: a token is
never printed whole) and the fix:

  no-expiry     a lock that never unlocks: a lock key without expiry (SETNX
                with no EXPIRE, or EXPIRE that never ran)
  huge-ttl      a lock that never unlocks: a TTL over an hour and ten times
                the median of the others
  fixed-value   occasional double entry: several lock keys holding one value
                (a fixed value shared by every client, so anyone's DEL or
                check-and-delete releases anyone's lock)
  long-hold     renewal that never ends: a dlock lock held for over ten of
                its TTLs and a minute (its fence records the grant's server
                time), by a watchdog without WithMaxHold
  dead-waiters  waiters queued for a lock whose client has shown no sign of
                life for over 10 s (a crashed process; they are skipped
                when reached, but their queue tells of it)
  kept-fence    a fence counter without expiry: kept forever (written by
                hand, or by a dlock from before counters expired)
  eviction      a memory limit (maxmemory) with an eviction policy that
                may evict dlock's keys: allkeys-* any key, volatile-* keys
                with a TTL, which all of dlock's have. An evicted lock key
                lets a second holder in; an evicted fence counter, queue or
                guard record breaks fencing and the wait order. Only
                noeviction is safe. A user whose ACL refuses CONFIG is told
                the policy could not be checked.

Exit codes: 0 nothing found; 1 findings; 64 usage; 69 Redis unreachable.

Examples:
  dlock doctor
  dlock doctor 'order:*' --json
`

func doctorMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("doctor", "[flags] [PATTERN]", doctorHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per finding")
	limit := fs.Int("limit", 100000, "audit at most this many keys per pattern and node")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 1 {
		return usageError(stderr, "doctor: give at most one PATTERN")
	}
	if *limit <= 0 {
		return usageError(stderr, "doctor: --limit must be positive")
	}
	pattern := defaultPattern
	if fs.NArg() == 1 {
		pattern = fs.Arg(0)
	}
	_, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var all []doctor.Finding
	for _, rdb := range rdbs {
		fs, err := doctor.Audit(ctx, rdb, pattern, *limit)
		if err == nil {
			var f *doctor.Finding
			var note string
			if f, note, err = doctor.Eviction(ctx, rdb); f != nil {
				fs = append(fs, *f)
			}
			if note != "" {
				fmt.Fprintln(stderr, "dlock: doctor:", note)
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "dlock: doctor: %s: %v\n", rdb.Options().Addr, err)
			return exitRedis
		}
		all = append(all, fs...)
	}
	for _, f := range all {
		if *asJSON {
			printJSON(stdout, f)
			continue
		}
		fmt.Fprintf(stdout, "%s: %s\n  %s\n  keys: %s\n  judged as: %s\n  fix: %s\n", f.Check, f.Row, f.What, strings.Join(f.Keys, ", "), f.Basis, f.Fix)
	}
	if len(all) > 0 {
		if !*asJSON {
			fmt.Fprintf(stdout, "\n%d finding(s)\n", len(all))
		}
		return 1
	}
	if !*asJSON {
		fmt.Fprintln(stdout, "no findings")
	}
	return exitOK
}
