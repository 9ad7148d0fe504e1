package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/dlock-go/dlock"
)

const electHelp = `
Campaign in the election NAME and run CMD while leader: wait until elected
(standbys wait in line, in the order they started), renew the leadership
in the background while CMD runs, resign when CMD exits, and exit with
CMD's exit status. A standby takes over when the leader resigns, or, when
the leader's process dies, once its TTL has run out.

CMD gets DLOCK_KEY, DLOCK_FENCE (the term: greater for every new leader)
and DLOCK_TOKEN in its environment. If the leadership is lost while CMD
runs, dlock says so, sends SIGTERM to CMD's process group (SIGKILL after
--kill-after) and exits 76, as 'dlock run' does.

The leadership's owner record is labelled with CMD's name alone, as for
'dlock run' (--label, --label-args: see 'dlock run --help').

--wait 0 makes one try, as for 'dlock run': elected if nobody leads, else
exit 75 at once, without waiting in line; a longer --wait waits in line
that long.

Exit codes: CMD's status (128+N if killed by signal N); 76 leadership lost
while CMD ran; 75 not elected within --wait (the election has a leader);
130 interrupted (SIGINT, SIGTERM, SIGHUP) while campaigning; 69 Redis
unavailable; 64 usage; 126/127 CMD not runnable/found; 70 internal error.

Examples:
  dlock elect --key scheduler -- ./scheduler        # one scheduler at a time
  dlock elect --key primary --value "$(hostname):8080" --ttl 10s -- ./serve
  dlock leader primary --watch                      # who leads, and each change
`

func electMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("elect", "--key NAME [flags] -- CMD [ARGS...]", electHelp, stderr)
	host, _ := os.Hostname()
	var (
		rf        redisFlags
		wait      waitFlag
		key       = fs.String("key", "", "election `NAME` (required)")
		value     = fs.String("value", "", "what Leader reports for this candidate (default: the host name)")
		ttl       = durationFlag(fs, "ttl", dlock.DefaultTTL, "leadership lease, renewed every TTL/3: how long a dead leader blocks its standbys")
		killAfter = durationFlag(fs, "kill-after", 10*time.Second, "after a lost leadership, SIGKILL CMD this long after SIGTERM")
	)
	rf.register(fs)
	var lf labelFlags
	lf.register(fs)
	var of otlpFlag
	of.register(fs)
	fs.Var(&wait, "wait", "how long to campaign (0: one try, as for run; default: until elected)")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if *value == "" {
		*value = host
	}
	cmdArgs := fs.Args()
	switch {
	case *key == "":
		return usageError(stderr, "elect: --key is required")
	case len(cmdArgs) == 0:
		return usageError(stderr, "elect: no command given (dlock elect --key NAME -- CMD ARGS...)")
	case *killAfter <= 0:
		return usageError(stderr, "elect: --kill-after must be positive")
	}
	c, rdbs, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	if err := firstContact(rdbs); err != nil {
		return redisFailed(stderr, "cannot lock", *key, err)
	}
	root, tr, stopTracing, err := of.command(c, nil, "dlock elect", stderr)
	if err != nil {
		return usageError(stderr, "elect: %v", err)
	}
	defer stopTracing()
	sigs := notifySignals()
	defer signal.Stop(sigs)
	lock, err := untilSignalled(root, sigs, func(ctx context.Context) (*dlock.Lock, error) {
		e := c.Election(*key)
		return waitFor(ctx, wait, func(ctx context.Context, opts ...dlock.Option) (*dlock.Lock, error) {
			return e.TryCampaign(ctx, *value, opts...)
		}, func(ctx context.Context, opts ...dlock.Option) (*dlock.Lock, error) {
			return e.Campaign(ctx, *value, opts...)
		}, []dlock.Option{dlock.WithTTL(*ttl), commandOwner("dlock elect", lf.of(cmdArgs))})
	})
	if err != nil {
		if errors.Is(err, dlock.ErrNotObtained) && !errors.Is(err, dlock.ErrNoQuorum) {
			return notElected(stderr, c, *key, wait.d)
		}
		return acquireFailed(stderr, *key, err, exitConflict)
	}
	code, _ := supervise(root, lock, *key, "leadership of", cmdArgs, tr.env(root), *killAfter, sigs, stdout, stderr)
	return code
}

// notElected reports a campaign that --wait ended: the election has a
// leader (it says whom, when it can still read it), which is no lock held
// by someone else. It returns exitConflict.
func notElected(stderr io.Writer, c *dlock.Client, key string, wait time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if ld, err := c.Election(key).Leader(ctx); err == nil {
		fmt.Fprintf(stderr, "dlock: %q has a leader: %q (term %d); not elected within --wait %v\n", key, ld.Value, ld.Term, wait)
	} else {
		fmt.Fprintf(stderr, "dlock: %q: not elected within --wait %v (others were in line or leading)\n", key, wait)
	}
	return exitConflict
}

const leaderHelp = `
Show who leads the election NAME: the value it campaigned with, its term
(the leadership's fence) and the remaining lease. With --watch, print the
leader, then every change (a new leader, or "no leader"), until
interrupted; if Redis cannot be read when it starts, it exits 69 at once,
and once running it waits through Redis failures, printing nothing.

Exit codes: 0 a leader; 1 nobody leads; 69 Redis unavailable; 64 usage.

Examples:
  dlock leader scheduler
  dlock leader --json primary
  dlock leader --watch primary
`

// leaderResult is what leader prints with --json.
type leaderResult struct {
	Key    string `json:"key"`
	Leader bool   `json:"leader"`
	Value  string `json:"value,omitempty"`
	Term   int64  `json:"term,omitempty"`
	TTLms  int64  `json:"ttl_ms,omitempty"`
}

func leaderMain(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("leader", "[flags] NAME", leaderHelp, stderr)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	watch := fs.Bool("watch", false, "print each change until interrupted")
	if stop, code := parse(fs, args); stop {
		return code
	}
	if fs.NArg() != 1 {
		return usageError(stderr, "leader: give exactly one NAME")
	}
	key := fs.Arg(0)
	c, _, closeAll, err := rf.connect(stderr)
	if err != nil {
		return usageError(stderr, "%v", err)
	}
	defer closeAll()
	show := func(ld dlock.Leader, ok bool) {
		var ttl time.Duration
		if ok { // the lease, as Inspect sees it
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if st, err := c.Inspect(ctx, key); err == nil && st.Held {
				ttl = st.TTL
			}
			cancel()
		}
		if *asJSON {
			printJSON(stdout, leaderResult{Key: key, Leader: ok, Value: ld.Value, Term: ld.Term, TTLms: ttl.Milliseconds()})
		} else if ok {
			fmt.Fprintf(stdout, "%s: led by %q, term %d, ttl %v\n", key, ld.Value, ld.Term, ttl.Round(time.Millisecond))
		} else {
			fmt.Fprintf(stdout, "%s: no leader\n", key)
		}
	}
	e := c.Election(key)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ld, err := e.Leader(ctx)
	switch {
	case errors.Is(err, dlock.ErrNoLeader):
		if !*watch {
			show(ld, false)
			return exitFree
		}
	case errors.Is(err, dlock.ErrWrongKind):
		fmt.Fprintf(stderr, "dlock: %q is held by a plain lock, not an election\n", key)
		return exitUsage
	case err != nil: // --watch too: a server it cannot read now is reported, not waited for
		return redisFailed(stderr, "leader", key, err)
	}
	if *watch {
		sigs := notifySignals()
		defer signal.Stop(sigs)
		wctx, stop := context.WithCancel(context.Background())
		defer stop()
		go func() { <-sigs; stop() }()
		for ld := range e.Observe(wctx).C {
			show(ld, ld != (dlock.Leader{}))
		}
		return exitOK
	}
	show(ld, true)
	return exitOK
}
