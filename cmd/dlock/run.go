package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock-go/dlock"
)

const runHelp = `
Run CMD while holding the lock on NAME: obtain it (waiting as --wait says),
renew it in the background while CMD runs, release it when CMD exits, and
exit with CMD's exit status. At most one 'dlock run --key NAME' on any host
runs its command at a time: a distributed flock(1).

CMD gets DLOCK_KEY, DLOCK_FENCE and DLOCK_TOKEN in its environment; pass
DLOCK_FENCE to what CMD writes, so that the resource can refuse a stale
holder.

If the lock is lost while CMD runs (a renewal finds it taken, or Redis stops
answering for longer than the lease, or --max-hold is reached), dlock says so
on stderr, sends SIGTERM to CMD's process group, SIGKILL after --kill-after,
and exits 76. SIGINT, SIGTERM and SIGHUP sent to dlock are passed on to CMD;
the lock is released after CMD exits. If dlock itself dies (kill -9), CMD's
whole process group is killed with it on Linux, so that nothing runs on
without the lock; on other systems CMD goes on, and the lock expires by its
TTL while it runs.

Exit codes: CMD's status (128+N if killed by signal N); 75 not obtained (see
--conflict-exit-code); 76 lock lost while CMD ran; 130 interrupted (SIGINT,
SIGTERM, SIGHUP) while waiting; 69 Redis unavailable; 64 usage; 126/127 CMD
not runnable/found; 70 internal error (CMD's status unreadable).

The hold's owner record (host, pid, "dlock run" and a label), which status,
ls and the console show, labels it with CMD's name alone: a command line
may hold secrets. --label TEXT says what it is for instead; --label-args
adds the arguments, masked: the password of user:password@ (a URL's or
not: user:xxxxx@), and the value given to a name that holds pass, pwd,
secret, token, auth or credential or ends in key after more (API_KEY, not
--key), as NAME=VALUE, --name=VALUE (a quoted value whole) or JSON's
"name": "value". Not recognised: a password given as an argument of its
own (--password hunter2, -p hunter2), a URL's password that holds a
blank, a secret under a name that does not say so.

With --permits N, up to N copies run at once (a semaphore on NAME, like
consul lock -n): each holds one permit while its command runs.

With --metrics-addr it serves the Prometheus metrics of dlock's adapter
with the label lock="NAME": dlock_holds and dlock_oldest_hold_seconds show
the hold while CMD runs. The hold's time and the release's result are
recorded at the release, as dlock is about to exit: --metrics-linger D
keeps the endpoint up D longer (say, your scrape interval and a little),
so that a scrape sees them; a signal ends the linger early (a run that a
signal stopped does not linger), and the exit status stays CMD's.

Examples:
  dlock run --key nightly-report -- ./report.sh --date today
  dlock run --key partner-api --permits 4 -- ./sync.sh   # at most 4 at once
  dlock run --key deploy --wait 0 -- make deploy        # give up at once if held
  dlock run --key sync --wait 5m --max-hold 1h -- rsync -a src/ dst/
  dlock run --key job --redis redis://r1:6379 --redis redis://r2:6379 --redis redis://r3:6379 -- ./job
`

func runMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("run", "--key NAME [flags] -- CMD [ARGS...]", runHelp, stderr)
	var (
		rf         redisFlags
		wait       waitFlag
		key        = fs.String("key", "", "lock `NAME` (required)")
		ttl        = durationFlag(fs, "ttl", dlock.DefaultTTL, "lease; renewed every TTL/3 while CMD runs")
		maxHold    = durationFlag(fs, "max-hold", 0, "ceiling on the total hold time (0: none); CMD is stopped when it is reached")
		killAfter  = durationFlag(fs, "kill-after", 10*time.Second, "after a lost lock, SIGKILL CMD this long after SIGTERM")
		conflict   = fs.Int("conflict-exit-code", exitConflict, "exit code when the lock is held by someone else")
		nodeTimout = durationFlag(fs, "node-timeout", 0, "per-node timeout for Redlock (0: the library default)")
		permits    = fs.Int("permits", 0, "run up to `N` copies at once (a semaphore on NAME; 0: one, a plain lock)")
	)
	rf.register(fs)
	var lf labelFlags
	lf.register(fs)
	var mf metricsFlag
	mf.register(fs)
	mf.registerLinger(fs)
	var of otlpFlag
	of.register(fs)
	fs.Var(&wait, "wait", "how long to wait for the lock (0: one try; default: until obtained)")
	if stop, code := parse(fs, args); stop {
		return code
	}
	cmdArgs := fs.Args()
	switch {
	case *key == "":
		return usageError(stderr, "run: --key is required")
	case len(cmdArgs) == 0:
		return usageError(stderr, "run: no command given (dlock run --key NAME -- CMD ARGS...)")
	case *killAfter <= 0:
		return usageError(stderr, "run: --kill-after must be positive")
	case *permits < 0:
		return usageError(stderr, "run: --permits must be at least 1 (or 0 for a plain lock)")
	}
	if err := exitCodeOK(*conflict); err != nil {
		return usageError(stderr, "run: %v", err)
	}
	opts := append(runOptions(*ttl, *maxHold, *nodeTimout), commandOwner("dlock run", lf.of(cmdArgs)))
	c, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	if err := firstContact(rdbs); err != nil {
		return redisFailed(stderr, "cannot lock", *key, err)
	}
	// The one key is the "lock" label: a single series per result.
	metrics, stopMetrics, err := mf.serve(stderr, func(string) string { return *key })
	if err != nil {
		return usageError(stderr, "run: %v", err)
	}
	defer stopMetrics()
	root, tr, stopTracing, err := of.command(c, metrics, "dlock run", stderr)
	if err != nil {
		return usageError(stderr, "run: %v", err)
	}
	defer stopTracing()

	sigs := notifySignals()
	defer signal.Stop(sigs)
	lock, err := untilSignalled(root, sigs, func(ctx context.Context) (*dlock.Lock, error) {
		if *permits > 0 {
			sem := c.Semaphore(*key, *permits)
			return waitFor(ctx, wait, sem.TryAcquire, sem.Acquire, opts)
		}
		return acquire(ctx, c, *key, wait, opts...)
	})
	if err != nil {
		return acquireFailed(stderr, *key, err, *conflict)
	}
	code, signalled := supervise(root, lock, *key, "lock", cmdArgs, tr.env(root), *killAfter, sigs, stdout, stderr)
	if !signalled { // a run stopped by a signal is not kept waiting
		mf.lingerAfter(sigs)
	}
	return code
}

// runOptions are run's lock options: the TTL, renewed in the background,
// and, when not 0, the ceiling on the hold and the per-node timeout.
func runOptions(ttl, maxHold, nodeTimeout time.Duration) []dlock.Option {
	opts := []dlock.Option{dlock.WithTTL(ttl), dlock.WithAutoRenew()}
	if maxHold != 0 {
		opts = append(opts, dlock.WithMaxHold(maxHold))
	}
	if nodeTimeout != 0 {
		opts = append(opts, dlock.WithNodeTimeout(nodeTimeout))
	}
	return opts
}

// notifySignals returns the channel of the signals run and elect handle:
// while waiting they stop the wait; while CMD runs they are passed on to it.
func notifySignals() chan os.Signal {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return sigs
}

// untilSignalled runs obtain with a context, from parent, that a signal on
// sigs ends.
func untilSignalled(parent context.Context, sigs <-chan os.Signal, obtain func(context.Context) (*dlock.Lock, error)) (*dlock.Lock, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	waiting := make(chan struct{})
	defer close(waiting)
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-waiting:
		}
	}()
	return obtain(ctx)
}

// supervise runs CMD while lock is held (what is "lock" or "leadership",
// for messages): it gets DLOCK_KEY, DLOCK_FENCE and DLOCK_TOKEN, and env
// (TRACEPARENT when tracing); signals are passed on to it (signalled
// reports one was); if the lock is lost, CMD is sent SIGTERM, SIGKILL
// after killAfter, and supervise returns exitLost; else CMD's status. The
// lock is released when CMD is done, under ctx (the run's span).
func supervise(ctx context.Context, lock *dlock.Lock, key, what string, cmdArgs, env []string, killAfter time.Duration, sigs <-chan os.Signal, stdout, stderr io.Writer) (code int, signalled bool) {
	cmd, err := guardCommand(cmdArgs)
	if err != nil {
		release(ctx, lock, stderr)
		fmt.Fprintf(stderr, "dlock: cannot run %s: %v\n", cmdArgs[0], err)
		return exitSoftware, false
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(append(os.Environ(), "DLOCK_KEY="+key, "DLOCK_FENCE="+strconv.FormatInt(lock.Fence(), 10),
		"DLOCK_TOKEN="+lock.Token()), env...)
	// CMD runs in a process group of its own, so that signals reach all
	// of it (and, on Linux, under a guardian that kills the group if dlock
	// dies: guard_linux.go).
	exited, err := startGuarded(cmd)
	if err != nil {
		release(ctx, lock, stderr)
		fmt.Fprintf(stderr, "dlock: cannot run %s: %v\n", cmdArgs[0], err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNoExec, false
		}
		return exitNotRunnable, false
	}
	var (
		lost    bool
		killer  <-chan time.Time
		lockEnd = lock.Context().Done()
		pgid    = cmd.Process.Pid
	)
	for done := false; !done; {
		select {
		case sig := <-sigs:
			signalled = true
			_ = signalGroup(pgid, sig.(syscall.Signal))
		case <-lockEnd:
			lockEnd = nil
			cause := context.Cause(lock.Context())
			if errors.Is(cause, dlock.ErrReleased) {
				continue
			}
			lost = true
			fmt.Fprintf(stderr, "dlock: %s %q lost while %s ran (%v); stopping it\n", what, key, cmdArgs[0], cause)
			_ = signalGroup(pgid, syscall.SIGTERM)
			t := time.NewTimer(killAfter)
			defer t.Stop()
			killer = t.C
		case <-killer:
			fmt.Fprintf(stderr, "dlock: %s still running %v after SIGTERM; killing it\n", cmdArgs[0], killAfter)
			_ = signalGroup(pgid, syscall.SIGKILL)
		case err = <-exited:
			done = true
		}
	}
	release(ctx, lock, stderr)
	if lost {
		return exitLost, signalled
	}
	return exitStatus(err), signalled
}

// release unlocks after CMD is done; a failure is reported, not fatal: the
// lock then runs out by its TTL.
func release(parent context.Context, lock *dlock.Lock, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), 10*time.Second)
	defer cancel()
	err := lock.Unlock(ctx)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		fmt.Fprintf(stderr, "dlock: releasing %q: %v (it expires by its TTL)\n", lock.Key(), err)
	}
}

// exitStatus turns cmd.Wait's error into an exit code like a shell's.
func exitStatus(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return exitSignalled + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitSoftware
}
