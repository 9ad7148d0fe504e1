package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite" // the SQL fencing row's database, pure Go

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
)

const demoHelp = `
Reproduce the experiments of the Redis guidance on distributed locks, and
two of its use cases (a scheduled job that runs once, at most N callers),
and print, for each, what the guidance expects, what happened, and PASS or
FAIL.

With no flags it needs nothing installed: it runs against an embedded
in-process Redis (miniredis). With --redis URL it runs against that server
instead (it only uses keys under demo:). If redis-server is on PATH (or with
--spawn), it also runs the experiments that need real processes, on servers
it starts on loopback and stops: a Sentinel failover that loses the
lock, and Redlock over five nodes with two, then three, of them down.

Its text fits 80 columns, or the terminal's width when $COLUMNS gives it.

Exit codes: 0 every experiment passed; 1 one failed; 64 usage; 69 Redis
unreachable or refused (a wrong password, say); 70 the embedded Redis did
not start.

Examples:
  dlock demo
  dlock demo --redis redis://127.0.0.1:6379
  dlock demo --spawn=false
`

// experiment is one row of the demo's table.
type experiment struct {
	name   string
	expect string
	run    func(ctx context.Context, e *env) (happened string, ok bool, err error)
}

// env is what an experiment runs against.
type env struct {
	rdb   *redis.Client // raw commands, as the guidance types them
	locks *dlock.Client
	other *dlock.Client // a second, independent client
}

func demoMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("demo", "[flags]", demoHelp, stderr)
	url := fs.String("redis", "", "run against this Redis `URL` instead of the embedded one")
	_, found := exec.LookPath("redis-server")
	spawn := fs.Bool("spawn", found == nil, "also run the process experiments (failover, Redlock); needs redis-server")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(stderr, "demo: unexpected arguments %q", fs.Args())
	}

	var opts *redis.Options
	where := "embedded Redis (miniredis)"
	if *url != "" {
		var err error
		if opts, err = parseRedisURL(*url, fromFlag); err != nil {
			return usageError(stderr, "demo: %v", err)
		}
		where = redact(*url)
	} else {
		m := miniredis.NewMiniRedis()
		m.ClockTTL(true) // keys expire in real time, as on a real server
		if err := m.Start(); err != nil {
			fmt.Fprintf(stderr, "dlock: demo: starting the embedded Redis: %v\n", err)
			return exitSoftware
		}
		defer m.Close()
		opts = &redis.Options{Addr: m.Addr()}
	}
	width := demoWidth()
	fmt.Fprintf(stdout, "dlock demo against %s\n\n", where)
	fmt.Fprint(stdout, wrap(demoIntro, width, "", ""), "\n")

	newClient := func() *redis.Client { return redis.NewClient(opts) }
	rdb, rdb2 := newClient(), newClient()
	defer rdb.Close()
	defer rdb2.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		// Said once: every experiment would fail the same way.
		fmt.Fprintf(stderr, "dlock: demo: cannot use %s: %v\n", where, err)
		return exitRedis
	}
	e := &env{rdb: rdb, locks: dlock.New(rdb), other: dlock.New(rdb2)}
	defer e.locks.Close()
	defer e.other.Close()

	failed := 0
	row := func(x experiment, happened string, ok bool, err error) {
		if err != nil {
			happened, ok = "error: "+err.Error(), false
		}
		verdict := "PASS"
		if strings.Contains(x.name, "the mistake") {
			verdict = "the unsafe way broke, as expected"
		}
		if !ok {
			verdict = "FAIL"
			failed++
		}
		fmt.Fprint(stdout, verdictLine(x.name, verdict, width))
		fmt.Fprint(stdout, wrap("expected: "+x.expect, width, "    ", "      "))
		fmt.Fprint(stdout, wrap("happened: "+happened, width, "    ", "      "))
	}
	for _, x := range experiments {
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		happened, ok, err := x.run(ctx, e)
		cancel()
		row(x, happened, ok, err)
	}
	if *spawn {
		for _, x := range processExperiments {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			happened, ok, err := x.run(ctx, nil)
			cancel()
			row(x, happened, ok, err)
		}
	} else {
		fmt.Fprint(stdout, wrap("(failover and Redlock experiments skipped: they need redis-server on PATH; see --spawn)", width, "", ""))
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "\n%d experiment(s) failed\n", failed)
		return 1
	}
	fmt.Fprintln(stdout, "\nall experiments passed")
	return exitOK
}

// demoColumns is the demo's width when the terminal's is not known, and
// minColumns the narrowest $COLUMNS it follows.
const (
	demoColumns = 80
	minColumns  = 40
)

// demoWidth is the width the demo's text fits: the terminal's, when
// $COLUMNS gives it (shells set it for their own use; export it to pass
// it on), else demoColumns.
func demoWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= minColumns {
		return n
	}
	return demoColumns
}

// verdictLine is a row's first line: its name, and its verdict at the
// right margin, beside the name if both fit in width, else on a line of
// its own.
func verdictLine(name, verdict string, width int) string {
	if pad := width - len(name) - len(verdict); pad >= 2 {
		return name + strings.Repeat(" ", pad) + verdict + "\n"
	}
	return fmt.Sprintf("%s\n%*s\n", name, width, verdict)
}

// demoIntro says what the rows refer to.
const demoIntro = `Each experiment comes from "the Redis guidance": an article on Redis locks that follows the Redis project's own documents (Distributed Locks with Redis, SET and its patterns, Lua scripting); its experiments 6.1-6.3 test mutual exclusion, a safe release against a bare DEL, and renewal by the holder only. Each row says what the guidance expects and what happened here. Rows named "the mistake" show an unsafe way the guidance warns against, done by hand with raw commands: for them, breaking is the expected outcome, and dlock's API cannot make them.`

// wrap breaks text into lines of at most width columns, the first
// starting with first, the others with rest, and ends it with a newline.
func wrap(text string, width int, first, rest string) string {
	var b strings.Builder
	line, indent := first, first
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line, indent = rest, rest
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	b.WriteString(line + "\n")
	return b.String()
}

// The guidance's scripts, as it types them into redis-cli.
const (
	seedUnlock = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	seedExtend = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
)

// waitGone polls until key no longer exists (its TTL ran out).
func waitGone(ctx context.Context, rdb *redis.Client, key string) error {
	for rdb.Exists(ctx, key).Val() != 0 {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never expired", key)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func demoKey(name string) string { return fmt.Sprintf("demo:%s:%d", name, time.Now().UnixNano()) }

var experiments = []experiment{
	{
		name:   "6.1 mutual exclusion",
		expect: "2nd SET NX fails; GET shows the 1st token; PTTL > 0",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("order:1001")
			a, err := e.locks.TryLock(ctx, k, dlock.WithTTL(15*time.Second))
			if err != nil {
				return "", false, err
			}
			defer a.Unlock(ctx)
			_, err = e.other.TryLock(ctx, k)
			got := e.rdb.Get(ctx, k).Val()
			pttl := e.rdb.PTTL(ctx, k).Val()
			ok := errors.Is(err, dlock.ErrNotObtained) && got == a.Token() && pttl > 0
			return fmt.Sprintf("2nd TryLock: %v; GET = 1st token: %v; PTTL %v", errText(err), got == a.Token(), pttl.Round(time.Millisecond)), ok, nil
		},
	},
	{
		name:   "6.2 token-checked release",
		expect: "A's stale unlock returns 0; B's lock stays",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("order:1002")
			a, err := e.locks.TryLock(ctx, k, dlock.WithTTL(100*time.Millisecond))
			if err != nil {
				return "", false, err
			}
			if err := waitGone(ctx, e.rdb, k); err != nil { // A stalls past its TTL
				return "", false, err
			}
			b, err := e.other.TryLock(ctx, k)
			if err != nil {
				return "", false, err
			}
			defer b.Unlock(ctx)
			err = a.Unlock(ctx)
			kept := e.rdb.Get(ctx, k).Val() == b.Token()
			return fmt.Sprintf("A's Unlock: ErrNotHeld: %v; B's lock kept: %v", errors.Is(err, dlock.ErrNotHeld), kept), errors.Is(err, dlock.ErrNotHeld) && kept, nil
		},
	},
	{
		name:   "6.2 the mistake: bare DEL",
		expect: "A's DEL deletes B's lock; C gets in while B works",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("order:1003")
			e.rdb.SetNX(ctx, k, "token-A", 100*time.Millisecond)
			if err := waitGone(ctx, e.rdb, k); err != nil {
				return "", false, err
			}
			e.rdb.SetNX(ctx, k, "token-B", 15*time.Second) // B holds it now
			deleted := e.rdb.Del(ctx, k).Val()             // A, back from its stall
			cIn := e.rdb.SetNX(ctx, k, "token-C", 15*time.Second).Val()
			e.rdb.Del(ctx, k)
			return fmt.Sprintf("DEL removed %d key (B's); C's SET NX: %v", deleted, cIn), deleted == 1 && cIn, nil
		},
	},
	{
		name:   "6.3 renewal only by the holder",
		expect: "wrong token: 0, TTL unchanged; right token: 1, TTL ~20s",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("job:9")
			l, err := e.locks.TryLock(ctx, k, dlock.WithTTL(5*time.Second))
			if err != nil {
				return "", false, err
			}
			defer l.Unlock(ctx)
			wrong, err := e.rdb.Eval(ctx, seedExtend, []string{k}, "wrong-token", 20000).Int()
			if err != nil {
				return "", false, err
			}
			before := e.rdb.PTTL(ctx, k).Val()
			err = l.Extend(ctx, 20*time.Second)
			after := e.rdb.PTTL(ctx, k).Val()
			ok := wrong == 0 && before <= 5*time.Second && err == nil && after > 15*time.Second
			return fmt.Sprintf("wrong token: %d (PTTL %v); holder's Extend: %v (PTTL %v)", wrong, before.Round(time.Second), errText(err), after.Round(time.Second)), ok, nil
		},
	},
	{
		name:   "the mistake: SETNX then EXPIRE",
		expect: "a crash in between leaves a lock that never expires",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("split")
			e.rdb.SetNX(ctx, k, "token", 0) // SETNX ... and the process dies before EXPIRE
			ttl := e.rdb.TTL(ctx, k).Val()
			e.rdb.Del(ctx, k)
			l, err := e.locks.TryLock(ctx, k)
			if err != nil {
				return "", false, err
			}
			defer l.Unlock(ctx)
			dttl := e.rdb.PTTL(ctx, k).Val()
			return fmt.Sprintf("split: TTL -1 (never expires); dlock's one SET NX PX: PTTL %v", dttl.Round(time.Second)), ttl == -1 && dttl > 0, nil
		},
	},
	{
		name:   "the mistake: a fixed value",
		expect: "anyone with the value unlocks someone else's lock",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("fixed")
			e.rdb.SetNX(ctx, k, "locked", 100*time.Millisecond) // A
			if err := waitGone(ctx, e.rdb, k); err != nil {
				return "", false, err
			}
			e.rdb.SetNX(ctx, k, "locked", 15*time.Second) // B, same value
			n, _ := e.rdb.Eval(ctx, seedUnlock, []string{k}, "locked").Int()
			a, _ := e.locks.TryLock(ctx, k, dlock.WithTTL(15*time.Second))
			b, _ := e.other.TryLock(ctx, k)
			distinct := a != nil && b == nil
			if a != nil {
				a.Unlock(ctx)
			}
			return fmt.Sprintf("A's check-and-DEL removed B's lock: %v; dlock tokens: a fresh 160-bit value per lock", n == 1), n == 1 && distinct, nil
		},
	},
	{
		name:   "watchdog renewal",
		expect: "a 300ms lock lives through 1.5s of work; others fail all along",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("long-job")
			l, err := e.locks.TryLock(ctx, k, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew())
			if err != nil {
				return "", false, err
			}
			defer l.Unlock(ctx)
			tries, stolen := 0, 0
			for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				tries++
				if o, err := e.other.TryLock(ctx, k); err == nil {
					stolen++
					o.Unlock(ctx)
				}
			}
			alive := l.Context().Err() == nil
			return fmt.Sprintf("%d tries by another client, %d succeeded; holder's context alive: %v", tries, stolen, alive), stolen == 0 && alive, nil
		},
	},
	{
		name:   "fencing token",
		expect: "the resource refuses the stale holder's write",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("ledger")
			a, err := e.locks.TryLock(ctx, k, dlock.WithTTL(100*time.Millisecond))
			if err != nil {
				return "", false, err
			}
			if err := waitGone(ctx, e.rdb, k); err != nil { // A pauses (GC, SIGSTOP) past its TTL
				return "", false, err
			}
			b, err := e.other.TryLock(ctx, k)
			if err != nil {
				return "", false, err
			}
			defer b.Unlock(ctx)
			// The resource, a Redis key behind guard.Redis: B writes,
			// then A wakes up and writes.
			ok, err := guardedWrites(ctx, e.rdb, k+":balance", b.Fence(), a.Fence())
			if err != nil {
				return "", false, err
			}
			return fmt.Sprintf("B (fence %d) accepted: %v; A (fence %d) accepted: %v", b.Fence(), ok[0], a.Fence(), ok[1]), ok[0] && !ok[1], nil
		},
	},
	{
		name:   "fencing token, SQL row (SQLite)",
		expect: "the database refuses the paused holder's late UPDATE",
		run:    sqlFenceExperiment,
	},
	{
		name:   "scheduled job runs once (election)",
		expect: "one of three instances leads; a standby takes over on resign, term higher",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("nightly-jobs")
			first, err := e.locks.Election(k).Campaign(ctx, "instance-1")
			if err != nil {
				return "", false, err
			}
			tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			_, err2 := e.other.Election(k).Campaign(tctx, "instance-2") // waits: someone leads
			cancel()
			next := make(chan *dlock.Lock, 1)
			go func() {
				l, _ := e.other.Election(k).Campaign(ctx, "instance-3")
				next <- l
			}()
			time.Sleep(50 * time.Millisecond) // instance-3 waits in line
			first.Unlock(ctx)                 // resign
			second := <-next
			if second == nil {
				return "", false, errors.New("the standby was not elected")
			}
			defer second.Unlock(ctx)
			ld, err := e.locks.Election(k).Leader(ctx)
			if err != nil {
				return "", false, err
			}
			ok := errors.Is(err2, dlock.ErrNotObtained) && ld.Value == "instance-3" && ld.Term > first.Fence()
			return fmt.Sprintf("instance-2 not elected while instance-1 led: %v; after the resign: %s leads, term higher: %v", errors.Is(err2, dlock.ErrNotObtained), ld.Value, ld.Term > first.Fence()), ok, nil
		},
	},
	{
		name:   "at most N callers (semaphore)",
		expect: "2 permits: a 3rd caller waits, and gets the first permit given back",
		run: func(ctx context.Context, e *env) (string, bool, error) {
			k := demoKey("partner-api")
			sem := e.locks.Semaphore(k, 2)
			a, err := sem.TryAcquire(ctx, dlock.WithTTL(15*time.Second))
			if err != nil {
				return "", false, err
			}
			b, err := e.other.Semaphore(k, 2).TryAcquire(ctx, dlock.WithTTL(15*time.Second))
			if err != nil {
				return "", false, err
			}
			defer b.Unlock(ctx)
			_, err3 := sem.TryAcquire(ctx)
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, _ := e.other.Semaphore(k, 2).Acquire(ctx)
				got <- l
			}()
			time.Sleep(50 * time.Millisecond) // the 3rd waits in line
			a.Unlock(ctx)
			c := <-got
			if c == nil {
				return "", false, errors.New("the waiter got no permit")
			}
			defer c.Unlock(ctx)
			ok := errors.Is(err3, dlock.ErrNotObtained) && c.Fence() > b.Fence()
			return fmt.Sprintf("3rd TryAcquire: %v; the waiter got the given-back permit: %v", errText(err3), c != nil), ok, nil
		},
	},
}

// guardedWrites writes to key through guard.Redis once per fence, in
// order, and says which writes were accepted.
func guardedWrites(ctx context.Context, rdb *redis.Client, key string, fences ...int64) ([]bool, error) {
	g := guard.NewRedis(rdb)
	var ok []bool
	for _, f := range fences {
		err := g.Set(ctx, key, f, f, time.Minute)
		if err != nil && !errors.Is(err, guard.ErrStaleFence) {
			return nil, err
		}
		ok = append(ok, err == nil)
	}
	return ok, nil
}

// sqlFenceExperiment: A holds the lock and writes an account's row in a
// real SQLite database; A pauses past its TTL; B takes the lock and
// writes; A wakes up and writes with its old fence: the UPDATE's fence
// condition refuses it.
func sqlFenceExperiment(ctx context.Context, e *env) (string, bool, error) {
	dir, err := os.MkdirTemp("", "dlock-demo-")
	if err != nil {
		return "", false, err
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.sqlite"))
	if err != nil {
		return "", false, err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE TABLE accounts (id TEXT PRIMARY KEY, balance BIGINT, fence BIGINT)"); err != nil {
		return "", false, err
	}
	accounts := guard.SQLTable{Dialect: guard.SQLite, Table: "accounts", ID: "id"}
	k := demoKey("account:42")
	a, err := e.locks.TryLock(ctx, k, dlock.WithTTL(100*time.Millisecond))
	if err != nil {
		return "", false, err
	}
	if err := accounts.For(a).Upsert(ctx, db, "42", map[string]any{"balance": 100}); err != nil {
		return "", false, err
	}
	if err := waitGone(ctx, e.rdb, k); err != nil { // A pauses past its TTL
		return "", false, err
	}
	b, err := e.other.TryLock(ctx, k)
	if err != nil {
		return "", false, err
	}
	defer b.Unlock(ctx)
	if err := accounts.For(b).Update(ctx, db, "42", map[string]any{"balance": 90}); err != nil {
		return "", false, err
	}
	// A wakes up, unaware, and writes with the fence it had.
	errA := accounts.Update(ctx, db, a.Fence(), "42", map[string]any{"balance": 110})
	var balance int64
	if err := db.QueryRowContext(ctx, "SELECT balance FROM accounts WHERE id = '42'").Scan(&balance); err != nil {
		return "", false, err
	}
	return fmt.Sprintf("B (fence %d) set 90; A's late UPDATE (fence %d): %v; balance %d", b.Fence(), a.Fence(), errText(errA), balance),
		errors.Is(errA, guard.ErrStaleFence) && balance == 90, nil
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	msg := err.Error()
	return strings.TrimPrefix(msg, "dlock: ")
}

// processExperiments need real redis-server processes, which they start on
// loopback and stop.
var processExperiments = []experiment{
	{
		name:   "Sentinel failover loses a grant",
		expect: "two holders after the promotion; the fence refuses the stale one",
		run:    sentinelExperiment,
	},
	{
		name:   "Redlock, 2 of 5 nodes down",
		expect: "a majority (3) still grants the lock",
		run: func(ctx context.Context, _ *env) (string, bool, error) {
			return redlockExperiment(ctx, 2)
		},
	},
	{
		name:   "Redlock, 3 of 5 nodes down",
		expect: "no majority: refused, with each node's error",
		run: func(ctx context.Context, _ *env) (string, bool, error) {
			return redlockExperiment(ctx, 3)
		},
	},
}

// sentinelExperiment is the seeds' central warning with real Sentinels: a
// master, two replicas, three Sentinels, and two clients through
// redis.NewFailoverClient. A's grant reaches the master only (its replicas
// were cut off a moment before, as a slow link would leave them); the
// master dies; the Sentinels promote a replica; B, through the same kind
// of client, obtains the same lock. B's write is accepted, A's refused.
func sentinelExperiment(ctx context.Context, _ *env) (string, bool, error) {
	st, err := redistest.SpawnSentinel(2)
	if err != nil {
		return "", false, err
	}
	defer st.Close()
	ardb, brdb := redis.NewFailoverClient(st.FailoverOptions()), redis.NewFailoverClient(st.FailoverOptions())
	defer ardb.Close()
	defer brdb.Close()
	al, bl := dlock.New(ardb), dlock.New(brdb)
	defer al.Close()
	defer bl.Close()
	k := demoKey("failover")
	old, err := st.Master(ctx)
	if err != nil {
		return "", false, err
	}
	resume, err := redistest.LoseReplication(ctx, old, st.Servers)
	if err != nil {
		return "", false, err
	}
	a, err := al.TryLock(ctx, k, dlock.WithTTL(time.Minute))
	old.Kill()
	resume()
	if err != nil {
		return "", false, err
	}
	start := time.Now()
	if _, err := st.WaitPromotion(old, time.Minute); err != nil {
		return "", false, err
	}
	var b *dlock.Lock
	for b == nil { // the failover client finds the new master
		if b, err = bl.TryLock(ctx, k, dlock.WithTTL(time.Minute)); err != nil {
			if ctx.Err() != nil || errors.Is(err, dlock.ErrNotObtained) {
				return "", false, err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	took := time.Since(start).Round(100 * time.Millisecond)
	ok, err := guardedWrites(ctx, brdb, k+":balance", b.Fence(), a.Fence())
	if err != nil {
		return "", false, err
	}
	return fmt.Sprintf("promoted in %v; A (old master) and B (promoted replica) both hold it; B's write: %v, A's stale write: %v", took, ok[0], ok[1]), ok[0] && !ok[1], nil
}

func redlockExperiment(ctx context.Context, down int) (string, bool, error) {
	var ucs []redis.UniversalClient
	var servers []*redistest.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	for i := 0; i < 5; i++ {
		s, err := redistest.Spawn()
		if err != nil {
			return "", false, err
		}
		servers = append(servers, s)
		rdb := redis.NewClient(s.Options())
		defer rdb.Close()
		ucs = append(ucs, rdb)
	}
	c := dlock.New(ucs...)
	defer c.Close()
	for _, s := range servers[:down] {
		s.Kill()
	}
	l, err := c.TryLock(ctx, demoKey("redlock"))
	if down < 3 {
		if err != nil {
			return "", false, err
		}
		defer l.Unlock(ctx)
		return fmt.Sprintf("obtained on %d of 5 nodes, fence %d", 5-down, l.Fence()), true, nil
	}
	var qe *dlock.QuorumError
	ok := errors.As(err, &qe) && !errors.Is(err, dlock.ErrNotObtained)
	if qe != nil {
		return fmt.Sprintf("refused: %d of 5 agreed, %d needed (%d node errors)", qe.OK, qe.Quorum, len(qe.Errs)), ok, nil
	}
	return fmt.Sprintf("unexpected: %v", err), false, nil
}
