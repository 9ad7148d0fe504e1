package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// queueLen returns how many waiters are queued for key (internal/keyspace names the
// queue).
func queueLen(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	return rdb.ZCard(context.Background(), "dlock:queue:{"+key+"}").Val()
}

// startWaiter starts Lock on its own Client and returns a channel that gets
// the lock (or nil) when Lock returns. It returns once the waiter is queued.
func startWaiter(t *testing.T, rdb *redis.Client, k string, queued int64, opts ...dlock.Option) <-chan *dlock.Lock {
	t.Helper()
	c, _ := newClient(t, shared())
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctxT(t), k, opts...)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	eventually(t, "the waiter is queued", func() bool { return queueLen(t, rdb, k) >= queued })
	return got
}

func TestWaitersAreServedInArrivalOrder(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	var waiters []<-chan *dlock.Lock
	for i := 1; i <= 5; i++ {
		waiters = append(waiters, startWaiter(t, rdb, k, int64(i), dlock.WithTTL(time.Minute)))
	}
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	last := holder.Fence()
	for i, w := range waiters {
		select {
		case l := <-w:
			if l == nil {
				t.Fatalf("waiter %d failed", i+1)
			}
			if l.Fence() <= last {
				t.Fatalf("waiter %d: fence %d after %d", i+1, l.Fence(), last)
			}
			last = l.Fence()
			// Nobody after it has the lock yet: the order is the queue's.
			for j, later := range waiters[i+1:] {
				select {
				case <-later:
					t.Fatalf("waiter %d got the lock before waiter %d released it", i+j+2, i+1)
				default:
				}
			}
			if err := l.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("waiter %d never got the lock", i+1)
		}
	}
}

// The hand-off reaches the waiter through its own grant list: no wake-up is
// lost even when releases come back to back, and no waiter waits for a TTL.
func TestEveryReleaseReachesTheNextWaiter(t *testing.T) {
	a, rdb := newClient(t, shared())
	b, _ := newClient(t, shared())
	k := key(t)
	l := mustLock(t, a, k, dlock.WithTTL(time.Minute))
	for i := 0; i < 50; i++ {
		next := b
		if i%2 == 1 {
			next = a
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			nl, err := next.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
			}
			got <- nl
		}()
		eventually(t, "queued", func() bool { return queueLen(t, rdb, k) == 1 })
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		select {
		case l = <-got:
			if l == nil {
				t.Fatal("waiter failed")
			}
		case <-time.After(20 * time.Second): // far below the minute-long TTL
			t.Fatalf("round %d: the release did not reach the waiter", i)
		}
	}
	_ = l.Unlock(ctxT(t))
}

func TestADeadWaiterIsSkipped(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	c, rdb := newClient(t, shared())
	ctx := ctxT(t)
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	// Two waiters that died: one long gone, one whose last sign of life
	// is recent, so it is granted the lock and never takes it up.
	now := serverNow(t, rdb)
	// A record is "token ttl_ms alive_until_ms fence keep_ms" (internal/wait);
	// the first three are what a dead one's purge reads.
	ms := now.UnixMilli()
	queue, waiters := "dlock:queue:{"+k+"}", "dlock:waiters:{"+k+"}"
	rdb.ZAdd(ctx, queue, redis.Z{Score: 1, Member: "gone"}, redis.Z{Score: 2, Member: "recent"})
	rdb.HSet(ctx, waiters,
		"gone", fmt.Sprintf("tok-gone 60000 %d 0", ms-2_000),
		"recent", fmt.Sprintf("tok-recent 60000 %d 0", ms+5_000))
	// The live waiter's join purges the long-gone one at the line's head.
	live := startWaiter(t, rdb, k, 2, dlock.WithTTL(time.Minute))
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead "recent" waiter got only a short claim, not its minute.
	if got := rdb.Get(ctx, k).Val(); got == "tok-recent" {
		if pttl := rdb.PTTL(ctx, k).Val(); pttl > 2*time.Second {
			t.Fatalf("the dead waiter's claim lasts %v", pttl)
		}
	}
	select {
	case l := <-live:
		if l == nil {
			t.Fatal("the live waiter failed")
		}
		_ = l.Unlock(ctx)
	case <-time.After(20 * time.Second): // far below the minute-long TTLs
		t.Fatal("the live waiter was stalled behind dead ones")
	}
}

func TestAWaiterThatGivesUpLeavesTheQueue(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	quitter, _ := newClient(t, shared())
	ctx, cancel := context.WithCancel(context.Background())
	quit := make(chan error, 1)
	go func() { _, err := quitter.Lock(ctx, k); quit <- err }()
	eventually(t, "the quitter is queued", func() bool { return queueLen(t, rdb, k) == 1 })
	stayer := startWaiter(t, rdb, k, 2, dlock.WithTTL(time.Minute))
	cancel()
	if err := <-quit; !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Fatalf("the quitter's Lock: %v", err)
	}
	eventually(t, "the quitter left the queue", func() bool { return queueLen(t, rdb, k) == 1 })
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-stayer:
		if l == nil {
			t.Fatal("the remaining waiter failed")
		}
		_ = l.Unlock(ctxT(t))
	case <-time.After(20 * time.Second):
		t.Fatal("the remaining waiter never got the lock")
	}
}

func TestANewcomerCannotJumpTheQueue(t *testing.T) {
	c, rdb := newClient(t, shared())
	newcomer, _ := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(time.Minute))
	waiter := startWaiter(t, rdb, k, 1, dlock.WithTTL(time.Minute))
	rdb.Del(ctxT(t), k) // freed without a hand-off, as a plain DEL would
	if _, err := newcomer.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a newcomer's TryLock on a free key with a queue: %v, want ErrNotObtained", err)
	}
	select {
	case l := <-waiter:
		if l == nil {
			t.Fatal("waiter failed")
		}
		_ = l.Unlock(ctxT(t))
	case <-time.After(20 * time.Second):
		t.Fatal("the queued waiter never got the lock")
	}
}

// holdsItsTTL fails the test unless l, just returned by a wait, holds the
// whole TTL asked for: on the server (the key's own expiry, as TTL reads
// it), and in the lease that its Context's deadline shows.
func holdsItsTTL(t *testing.T, l *dlock.Lock, ttl time.Duration) {
	t.Helper()
	dl, _ := l.Context().Deadline()
	left, err := l.TTL(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	// A second is far more than a hand-off takes, and far less than the
	// claim a hand-off gives to another Client's waiter.
	if left < ttl-time.Second || time.Until(dl) < ttl-2*time.Second {
		t.Fatalf("right after the wait the key has %v and the lease %v left, want about %v", left, time.Until(dl), ttl)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestAHandedOverLockHoldsItsWholeTTLWhenLockReturns(t *testing.T) {
	const ttl = time.Minute
	for _, tc := range []struct {
		name      string
		sameGroup bool // the waiter on the holder's Client
	}{{"another Client", false}, {"the holder's Client", true}} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newClient(t, shared())
			b, _ := newClient(t, shared())
			if tc.sameGroup {
				b = a
			}
			k := key(t)
			holder := mustLock(t, a, k, dlock.WithTTL(ttl))
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := b.Lock(ctxT(t), k, dlock.WithTTL(ttl))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			_, rdb := newClient(t, shared())
			eventually(t, "the waiter is queued", func() bool { return queueLen(t, rdb, k) == 1 })
			if err := holder.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if l := <-got; l != nil {
				holdsItsTTL(t, l, ttl)
			}
		})
	}
}

func TestAHandedOverPermitReadHoldAndLeadershipHoldTheirWholeTTL(t *testing.T) {
	const ttl = time.Minute
	a, rdb := newClient(t, shared())
	b, _ := newClient(t, shared())
	for _, tc := range []struct {
		name      string
		hold, get func(c *dlock.Client, k string) (*dlock.Lock, error)
	}{
		{"semaphore", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Semaphore(k, 1).TryAcquire(ctxT(t), dlock.WithTTL(ttl))
		}, func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Semaphore(k, 1).Acquire(ctxT(t), dlock.WithTTL(ttl))
		}},
		{"read hold", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWMutex(k).TryLock(ctxT(t), dlock.WithTTL(ttl))
		}, func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.RWMutex(k).RLock(ctxT(t), dlock.WithTTL(ttl))
		}},
		{"leadership", func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Election(k).Campaign(ctxT(t), "a", dlock.WithTTL(ttl))
		}, func(c *dlock.Client, k string) (*dlock.Lock, error) {
			return c.Election(k).Campaign(ctxT(t), "b", dlock.WithTTL(ttl))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key(t)
			holder, err := tc.hold(a, k)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := tc.get(b, k)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			eventually(t, "the waiter is queued", func() bool { return queueLen(t, rdb, k) == 1 })
			if err := holder.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if l := <-got; l != nil {
				holdsItsTTL(t, l, ttl)
			}
		})
	}
}

func TestQueuedWaitersGetAKeySetByHandWhenItIsDeleted(t *testing.T) {
	_, rdb := newClient(t, shared())
	k := key(t)
	rdb.Set(ctxT(t), k, "by-hand", time.Minute)
	w := startWaiter(t, rdb, k, 1)
	if got := rdb.Get(ctxT(t), k).Val(); got != "by-hand" {
		t.Fatalf("the key became %q while held by hand", got)
	}
	rdb.Del(ctxT(t), k)
	select {
	case l := <-w:
		if l == nil {
			t.Fatal("waiter failed")
		}
		_ = l.Unlock(ctxT(t))
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter never got the freed key")
	}
}

// Two goroutines of one Client taking turns on a key: each waits while
// the other holds it, and a finished wait's watch outlives it
// (watchLinger), so the wake channel is subscribed once, not once a turn.
func TestTwoGoroutinesTakingTurnsSubscribeOnceAndOnlyJoin(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	k := key(t)
	start := time.Now()
	takeTurns(t, []*dlock.Client{c, c}, k, 20)
	took := time.Since(start)
	// A turn that a loaded machine stalls past watchLinger (100 ms) may
	// subscribe again: a few, and one per 100 ms the turns took, at most.
	switch n, most := redistest.CommandCalls(rdb, "subscribe"), 3+int(took/(100*time.Millisecond)); {
	case n == 0:
		t.Fatal("no waiter subscribed: the turns were not contended")
	case n > most:
		t.Fatalf("%d SUBSCRIBEs for 40 turns in %v, want one (%d at most)", n, took, most)
	}
	// Each turn is at most two scripts: the waiter's acquire that queues
	// it and the holder's release that hands it over (line_handover.go);
	// a keepalive may come between, one each linePoll (a third of a
	// second) that the turns took: a loaded machine's turns take longer.
	n := redistest.ScriptRuns(rdb)
	keepalives := 8 + int(took/(300*time.Millisecond))
	t.Logf("%d scripts for 40 turns of one Client's two goroutines in %v (%.2f a turn)", n, took, float64(n)/40)
	if n > 2*40+keepalives {
		t.Fatalf("%d scripts for 40 turns in %v, want at most two each and %d keepalives", n, took, keepalives)
	}
}

// A release that hands the key to a waiter of its own Client gives it the
// whole TTL at once: the waiter's Lock returns with a lease of its TTL, a
// newer fence, and no confirming acquire or wake message. The scripts are
// counted on the server, where the waiter's keepalive (every linePoll) may
// fall between the unlock and the grant on a loaded machine: the hand-off
// is tried on up to three keys, and one must run the release alone (a
// confirming acquire would be in every one).
func TestAHandoverWithinAClientGivesTheWholeTTL(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	ctx := ctxT(t)
	k := key(t)
	if err := mustLock(t, c, k+"-warm", dlock.WithTTL(time.Minute)).Unlock(ctx); err != nil { // the scripts loaded
		t.Fatal(err)
	}
	for try := range 3 {
		scripts, published := handOver(t, c, rdb, fmt.Sprint(k, try))
		if published != 0 {
			t.Fatalf("%d wake messages for a handover, want none", published)
		}
		if scripts == 1 {
			return
		}
		t.Logf("%d scripts from the unlock to the waiter's grant (a keepalive between?)", scripts)
	}
	t.Error("more than one script from the unlock to the waiter's grant in each of 3 hand-offs, want 1 (the release)")
}

// handOver has a holder of k hand it to a waiter of the same Client, checks
// the waiter's lock (a newer fence, the whole TTL, a live Context), and
// returns the scripts the server ran from the unlock to the grant and the
// wake messages published.
func handOver(t *testing.T, c *dlock.Client, rdb *redis.Client, k string) (scripts, published int) {
	t.Helper()
	ctx := ctxT(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, k, dlock.WithTTL(2*time.Minute))
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	eventually(t, "the waiter is queued", func() bool { return queueLen(t, rdb, k) == 1 })
	runs := func() int { return redistest.ScriptRuns(rdb) }
	// Its subscription's readiness wakes it once (a hand-off published
	// before it would be missed): let that acquire pass first.
	before := runs()
	eventually(t, "the waiter's scripts settle", func() bool {
		time.Sleep(50 * time.Millisecond)
		n := runs()
		defer func() { before = n }()
		return n == before
	})
	wakes := redistest.CommandCalls(rdb, "publish")
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	scripts, published = runs()-before, redistest.CommandCalls(rdb, "publish")-wakes
	defer func() { _ = l.Unlock(ctx) }()
	if l.Fence() <= holder.Fence() {
		t.Errorf("fence %d after the holder's %d", l.Fence(), holder.Fence())
	}
	if pttl := rdb.PTTL(ctx, k).Val(); pttl < time.Minute {
		t.Errorf("the key's PTTL is %v, want about the waiter's 2 minutes", pttl)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl < time.Minute {
		t.Errorf("the lock's TTL is %v (%v), want about 2 minutes", ttl, err)
	}
	if l.Context().Err() != nil {
		t.Error("the handed-over lock's context has ended")
	}
	return scripts, published
}

// Callers that give up faster than the server runs their joins and leaves
// (200 goroutines on one key, each Lock with a deadline of 1-5 ms) do not
// fill the queue with departed waiters, to whom every grant would go first:
// the Client holds new waiters back while 64 departures are under way. The
// queue stays near the callers' number and empties when they stop, and a
// Lock right after gets the key. (Under the race detector the callers are
// too slow to outpace the server; make test runs it without, too.)
func TestCallersThatGiveUpFasterThanTheServerAnswersDoNotFillTheQueue(t *testing.T) {
	c, rdb := newClient(t, redistest.Start(t))
	k := key(t)
	stop := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			for n := i; time.Now().Before(stop); n++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n%5+1)*time.Millisecond)
				if l, err := c.Lock(ctx, k); err == nil {
					_ = l.Unlock(context.Background())
				}
				cancel()
			}
		})
	}
	var most int64
	for time.Now().Before(stop) {
		most = max(most, queueLen(t, rdb, k))
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if most > 1000 { // without the hold-back: thousands
		t.Errorf("%d waiters in line at once, for 200 callers", most)
	}
	eventually(t, "the queue empties", func() bool { return queueLen(t, rdb, k) == 0 })
	ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, k)
	if err != nil {
		t.Fatalf("Lock after the callers stopped: %v", err)
	}
	_ = l.Unlock(ctxT(t))
}

// The scripts a real server runs (INFO commandstats): two for an
// uncontended Lock and Unlock; for goroutines of two Clients taking turns
// on a key, three per turn (the waiter's acquire that queues it, the
// holder's release that hands it the key, its acquire that confirms: the
// Clients differ, so no handover), and a keepalive or a subscription's
// first wake now and then.
func TestScriptsPerLockAndPerHandOff(t *testing.T) {
	s := redistest.Start(t)
	a, rdb := newClient(t, s)
	b, _ := newClient(t, s)
	k := key(t)
	scripts := func() int {
		return redistest.ScriptRuns(rdb)
	}
	var before int
	for range 2 { // the first loads the scripts (EVALSHA, NOSCRIPT, EVAL)
		before = scripts()
		l := mustLock(t, a, k, dlock.WithTTL(time.Minute))
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := scripts() - before; n != 2 {
		t.Fatalf("an uncontended Lock and Unlock ran %d scripts, want 2", n)
	}
	const turns = 50
	before = scripts()
	takeTurns(t, []*dlock.Client{a, b}, k, turns)
	per := float64(scripts()-before) / (2 * turns)
	t.Logf("%.2f scripts per turn, %d turns of two Clients' goroutines", per, 2*turns)
	if per > 3.2 {
		t.Fatalf("%.2f scripts per turn, want at most three (and a few keepalives)", per)
	}
}

// takeTurns runs a goroutine per client of clients, each locking k turns
// times, holding it 2 ms each time.
func takeTurns(t *testing.T, clients []*dlock.Client, k string, turns int) {
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Go(func() {
			for range turns {
				l, err := c.Lock(ctxT(t), k)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(2 * time.Millisecond)
				if err := l.Unlock(ctxT(t)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

// The waiters of a process that crashed while hundreds of its goroutines
// waited are purged by the next script that reaches them (the release, or
// the live waiter's keepalive) in one go, and the key goes to the live
// waiter behind them (found by review: 16 a script, so a live
// waiter behind 300 dead ones waited about 5 s after the unlock).
func TestAReleasePurgesACrashedProcesssWaitersAtOnce(t *testing.T) {
	c, rdb := newClient(t, shared())
	ctx := ctxT(t)
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	now := serverNow(t, rdb)
	queue, waiters := "dlock:queue:{"+k+"}", "dlock:waiters:{"+k+"}"
	for i := range 300 {
		id := fmt.Sprintf("dead%d", i)
		rdb.ZAdd(ctx, queue, redis.Z{Score: float64(i + 1), Member: id})
		rdb.HSet(ctx, waiters, id, fmt.Sprintf("tok-%s 60000 %d 0", id, now.UnixMilli()+1_000))
	}
	live := startWaiter(t, rdb, k, 301, dlock.WithTTL(time.Minute))
	// The process "crashes": its records lapse a second after it queued.
	eventually(t, "the dead records lapse", func() bool {
		return rdb.Time(ctx).Val().After(now.Add(1100 * time.Millisecond))
	})
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := queueLen(t, rdb, k); n > 1 {
		t.Fatalf("after the release, %d in line: the dead waiters were not purged", n)
	}
	if l := <-live; l == nil {
		t.Fatal("the live waiter failed")
	} else {
		_ = l.Unlock(ctx)
	}
}

// serverNow is the server's clock (waiter records count in its time).
func serverNow(t *testing.T, rdb *redis.Client) time.Time {
	t.Helper()
	now, err := rdb.Time(ctxT(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}
