package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// startNodes starts n independent masters.
func startNodes(t *testing.T, n int) []*redistest.Server {
	t.Helper()
	var nodes []*redistest.Server
	for i := 0; i < n; i++ {
		nodes = append(nodes, redistest.Start(t))
	}
	return nodes
}

// newRedlock returns a Client over all nodes, each with its own go-redis
// client, and those clients.
func newRedlock(t *testing.T, nodes []*redistest.Server, tune ...func(*redis.Options)) (*dlock.Client, []*redis.Client) {
	t.Helper()
	var (
		rdbs []*redis.Client
		ucs  []redis.UniversalClient
	)
	for _, s := range nodes {
		opts := s.Options()
		for _, f := range tune {
			f(opts)
		}
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { rdb.Close() })
		// Open a connection now, so that dialling it does not count
		// against the first command's node timeout.
		_ = rdb.Ping(context.Background()).Err()
		rdbs = append(rdbs, rdb)
		ucs = append(ucs, rdb)
	}
	c := dlock.New(ucs...)
	t.Cleanup(func() { c.Close() })
	return c, rdbs
}

// pausableRedlock starts n masters for tests that pause some of them: the
// go-redis read timeout is far beyond the node timeout, so that only the
// node timeout cuts a paused node's answer short, and the scripts are
// already loaded on every node.
func pausableRedlock(t *testing.T, n int) ([]*redistest.Server, *dlock.Client, []*redis.Client) {
	t.Helper()
	nodes := startNodes(t, n)
	c, rdbs := newRedlock(t, nodes, func(o *redis.Options) { o.ReadTimeout = 30 * time.Second })
	mustLock(t, c, key(t))
	return nodes, c, rdbs
}

// holders counts the nodes on which key holds value.
func holders(t *testing.T, rdbs []*redis.Client, key, value string) int {
	t.Helper()
	n := 0
	for _, rdb := range rdbs {
		if v, err := rdb.Get(context.Background(), key).Result(); err == nil && v == value {
			n++
		}
	}
	return n
}

// onEveryNode waits until l is held on every node. A Redlock acquire
// returns once a majority granted it; tests that then take the lock away
// from some nodes need it on all of them first.
func onEveryNode(t *testing.T, rdbs []*redis.Client, l *dlock.Lock) {
	t.Helper()
	eventually(t, "the lock is on every node", func() bool { return holders(t, rdbs, l.Key(), l.Token()) == len(rdbs) })
}

func TestRedlockMutualExclusionAndIncreasingFences(t *testing.T) {
	nodes := startNodes(t, 5)
	var clients []*dlock.Client
	for w := 0; w < 6; w++ {
		c, _ := newRedlock(t, nodes)
		clients = append(clients, c)
	}
	// This test is about exclusion and fences, not speed: a node timeout
	// far above the default keeps a loaded machine's pauses from failing
	// an Unlock (TestRedlockLockWaitsForSlowNodes covers slow nodes).
	checkExclusion(t, clients, 15, dlock.WithNodeTimeout(10*time.Second))
}

func TestRedlockWorksWithTwoOfFiveNodesDown(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	nodes[0].Kill()
	nodes[3].Kill()
	k := key(t)
	l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock with 3 of 5 nodes: %v", err)
	}
	if n := holders(t, rdbs, k, l.Token()); n != 3 {
		t.Fatalf("lock on %d nodes, want the 3 live ones", n)
	}
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("second TryLock: %v, want ErrNotObtained", err)
	}
	if err := l.Extend(ctxT(t), 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if d, err := l.TTL(ctxT(t)); err != nil || d <= time.Minute {
		t.Fatalf("TTL = %v, %v", d, err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if n := holders(t, rdbs, k, l.Token()); n != 0 {
		t.Fatalf("lock left on %d nodes after Unlock", n)
	}
}

func TestRedlockWithThreeOfFiveNodesDownFailsFastAndLeavesNoKey(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	for _, i := range []int{0, 2, 4} {
		nodes[i].Kill()
	}
	k := key(t)
	// With WithFailFast, Lock does not wait for missing nodes at all.
	_, err := c.Lock(ctxT(t), k, dlock.WithFailFast())
	if !errors.Is(err, dlock.ErrNoQuorum) || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with 2 of 5 nodes: %v, want ErrNoQuorum and not ErrNotObtained", err)
	}
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Node == "" {
		t.Fatalf("error %v does not carry a node's error", err)
	}
	var qe *dlock.QuorumError
	if !errors.As(err, &qe) || qe.OK != 2 || qe.Quorum != 3 || len(qe.Errs) != 3 {
		t.Fatalf("QuorumError = %+v", qe)
	}
	for _, i := range []int{1, 3} {
		if rdbs[i].Exists(ctxT(t), k).Val() != 0 {
			t.Errorf("live node %d kept the key", i)
		}
	}
	// Without it, Lock waits for them until its context ends, and says
	// both why it stopped and what the nodes said.
	ctx, cancel := context.WithTimeout(ctxT(t), 500*time.Millisecond)
	defer cancel()
	_, err = c.Lock(ctx, k)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("Lock with 2 of 5 nodes until its context ends: %v, want ErrNotObtained, DeadlineExceeded and ErrNoQuorum", err)
	}
}

// Nodes that are only slow are not down: Lock keeps trying until they
// answer or its context ends (whose error then also carries the last
// attempt's *QuorumError).
func TestRedlockLockWaitsForSlowNodes(t *testing.T) {
	nodes, c, rdbs := pausableRedlock(t, 3)
	var logs syncBuffer
	c.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	k := key(t)
	opts := []dlock.Option{dlock.WithTTL(time.Minute), dlock.WithNodeTimeout(100 * time.Millisecond)}
	nodes[0].Pause()
	nodes[2].Pause()
	defer nodes[0].Resume()
	defer nodes[2].Resume()
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.Lock(ctx, k, opts...)
	if took := time.Since(start); took >= 30*time.Second {
		// Subscribing to a paused node's release messages must not hold
		// the waiter up (internal/transport/subscriber.go).
		t.Fatalf("Lock took %v: it waited for the paused nodes' read timeout", took)
	}
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("Lock with 2 of 3 nodes paused: %v, want ErrNotObtained, DeadlineExceeded and ErrNoQuorum", err)
	}
	if n := strings.Count(logs.String(), "waiting for a majority"); n != 1 {
		t.Fatalf("the wait for slow nodes was logged %d times, want once:\n%s", n, logs.String())
	}
	nodes[0].Resume()
	nodes[2].Resume()
	// Once they answer, Lock gets the lock, though the paused nodes run
	// every attempt sent to them in the meantime.
	l, err := c.Lock(ctxT(t), k, opts...)
	if err != nil {
		t.Fatalf("Lock after the nodes resumed: %v", err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	for i, rdb := range rdbs {
		eventually(t, fmt.Sprintf("node %d has no key left", i), func() bool { return rdb.Exists(ctxT(t), k).Val() == 0 })
	}
}

func TestRedlockStalledNodeCostsAtMostTheNodeTimeout(t *testing.T) {
	nodes, c, rdbs := pausableRedlock(t, 5)
	k := key(t)
	nodes[2].Pause()
	start := time.Now()
	l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Minute), dlock.WithNodeTimeout(100*time.Millisecond))
	took := time.Since(start)
	nodes[2].Resume()
	if err != nil {
		t.Fatalf("TryLock with one node paused: %v", err)
	}
	if took >= 30*time.Second {
		t.Fatalf("TryLock took %v: it waited for the paused node's read timeout", took)
	}
	t.Logf("TryLock with one paused node took %v (node timeout 100ms)", took)
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	// The paused node ran the acquire after it resumed; that late grant
	// must be released, not left for the TTL.
	eventually(t, "the paused node's late grant is released", func() bool {
		return rdbs[2].Exists(ctxT(t), k).Val() == 0
	})
}

func TestRedlockLateGrantOfAFailedAcquireIsReleased(t *testing.T) {
	nodes, c, rdbs := pausableRedlock(t, 5)
	k := key(t)
	for _, i := range []int{0, 1} {
		rdbs[i].Set(ctxT(t), k, "someone-else", time.Minute)
	}
	nodes[4].Pause()
	_, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Hour), dlock.WithNodeTimeout(100*time.Millisecond))
	nodes[4].Resume()
	if !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("TryLock: %v, want ErrNoQuorum (2 taken, 2 granted, 1 silent)", err)
	}
	for _, i := range []int{2, 3} {
		if rdbs[i].Exists(ctxT(t), k).Val() != 0 {
			t.Errorf("node %d kept the key after the failed acquire", i)
		}
	}
	eventually(t, "the silent node's late grant is released", func() bool {
		return rdbs[4].Exists(ctxT(t), k).Val() == 0
	})
}

func TestRedlockLateGrantAfterTheLeaseEndedIsGivenBack(t *testing.T) {
	nodes, c, rdbs := pausableRedlock(t, 3)
	k := key(t)
	expired := func() string { return redistest.Info(rdbs[2], "stats")["expired_keys"] }
	before := expired()
	nodes[2].Pause()
	l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Second))
	if err != nil {
		nodes[2].Resume()
		t.Fatalf("TryLock on two of three: %v", err)
	}
	<-l.Context().Done() // the lease ends: the holder has been told
	nodes[2].Resume()
	eventually(t, "the grant that came after the lease is gone", func() bool {
		return rdbs[2].Exists(ctxT(t), k).Val() == 0
	})
	if after := expired(); after != before {
		t.Fatalf("node 2's late grant expired by its TTL (expired_keys %s -> %s) instead of being given back", before, after)
	}
}

func TestRedlockKeyHeldOnThreeNodesIsNotObtainedAndTheOthersAreCleaned(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	for _, i := range []int{0, 2, 3} {
		rdbs[i].Set(ctxT(t), k, "someone-else", time.Minute)
	}
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock: %v, want ErrNotObtained", err)
	}
	for _, i := range []int{1, 4} {
		if rdbs[i].Exists(ctxT(t), k).Val() != 0 {
			t.Errorf("node %d kept our key", i)
		}
	}
	if n := holders(t, rdbs, k, "someone-else"); n != 3 {
		t.Errorf("the other holder's key is on %d nodes, want 3", n)
	}
}

func TestRedlockContextDeadlineIsWithinTTLMinusDrift(t *testing.T) {
	nodes := startNodes(t, 5)
	c, _ := newRedlock(t, nodes)
	const ttl = 3 * time.Second
	drift := ttl/100 + 2*time.Millisecond
	for i := 0; i < 20; i++ {
		l := mustLock(t, c, key(t), dlock.WithTTL(ttl))
		// The deadline counts from before the request was sent, so right
		// after the grant at most TTL - drift can remain.
		dl, _ := l.Context().Deadline()
		if left := time.Until(dl); left > ttl-drift {
			t.Fatalf("%v left right after acquire, more than TTL - drift = %v", left, ttl-drift)
		}
	}
}

// Choice (b) of redlock.go: a release raises every node's counter to the
// holder's fence, so a later grant cannot come out lower even when the node
// that produced the high fence is gone.
func TestRedlockFenceDoesNotRegressWhenTheNodeWithTheHighestCounterIsLost(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	first := mustLock(t, c, k)
	if err := first.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// Unlock returns once a majority released; wait for the rest (and for
	// late grants given back), so that the next lock can be on every node.
	eventually(t, "the first lock is gone from every node", func() bool {
		for _, rdb := range rdbs {
			if rdb.Exists(ctxT(t), k).Val() != 0 {
				return false
			}
		}
		return true
	})
	// The counters of nodes 0-2 run far ahead (fast clocks, say). Every
	// majority includes one of them, so the next fence is that high.
	fenceKey := "dlock:fence:{" + k + "}"
	ahead := first.Fence() + 1_000_000_000
	for _, i := range []int{0, 1, 2} {
		rdbs[i].Set(ctxT(t), fenceKey, ahead, time.Hour)
	}
	high := mustLock(t, c, k)
	if high.Fence() <= ahead {
		t.Fatalf("fence %d, want above the counters %d", high.Fence(), ahead)
	}
	// Let the slowest nodes' grants land, then release: every node's
	// counter is raised to the fence, or will be before that node's key is
	// free again.
	onEveryNode(t, rdbs, high)
	if err := high.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// A node that may have produced the high fence loses everything; the
	// others remember it.
	rdbs[0].FlushAll(ctxT(t))
	next := mustLock(t, c, k)
	if next.Fence() <= high.Fence() {
		t.Fatalf("fence went from %d to %d after node 0 lost its data", high.Fence(), next.Fence())
	}
}

func TestRedlockFencesKeepGrowingAsNodesLoseData(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	var last int64
	for round := 0; round < 10; round++ {
		l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", round, l.Fence(), last)
		}
		last = l.Fence()
		if round%2 == 0 {
			_ = l.Unlock(ctxT(t))
		} else {
			// Lost instead of released: a minority of nodes forgets it
			// all, and the rest let it expire.
			_ = l.Extend(ctxT(t), 20*time.Millisecond)
		}
		rdbs[round%5].FlushAll(ctxT(t))
		rdbs[(round+2)%5].FlushAll(ctxT(t))
		if round == 4 {
			nodes[1].Kill()
			if err := nodes[1].Restart(); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the key is free", func() bool {
			return holders(t, rdbs, k, l.Token()) == 0
		})
	}
}

func TestRedlockUnlockIsNotHeldOnlyWithoutAQuorum(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)

	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	onEveryNode(t, rdbs, l)
	rdbs[0].Set(ctxT(t), k, "someone-else", time.Minute)
	rdbs[1].Set(ctxT(t), k, "someone-else", time.Minute)
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock with 3 of 5 still ours: %v", err)
	}

	k2 := key(t)
	l2 := mustLock(t, c, k2, dlock.WithTTL(time.Minute))
	onEveryNode(t, rdbs, l2)
	for _, i := range []int{0, 1, 2} {
		rdbs[i].Set(ctxT(t), k2, "someone-else", time.Minute)
	}
	if err := l2.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with 2 of 5 still ours: %v, want ErrNotHeld", err)
	}
	if n := holders(t, rdbs, k2, "someone-else"); n != 3 {
		t.Fatalf("the other holder's key is on %d nodes, want 3", n)
	}
}

func TestRedlockRenewalDoAndWaiting(t *testing.T) {
	nodes := startNodes(t, 5)
	c, _ := newRedlock(t, nodes)
	other, _ := newRedlock(t, nodes)
	k := key(t)
	got := make(chan *dlock.Lock, 1)
	err := c.Do(ctxT(t), k, func(ctx context.Context) error {
		go func() {
			l, err := other.Lock(ctxT(t), k) // waits for Do's Unlock
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		// Four TTLs of work: the watchdog keeps the lock.
		for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
		}
		return nil
	}, dlock.WithTTL(250*time.Millisecond))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("waiter failed")
		}
		_ = l.Unlock(ctxT(t))
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter never got the lock")
	}
}

func TestRedlockMaxHoldAndLoss(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	nodes := startNodes(t, 3)
	c, rdbs := newRedlock(t, nodes)
	l := mustLock(t, c, key(t), dlock.WithTTL(time.Second), dlock.WithAutoRenew(), dlock.WithMaxHold(2500*time.Millisecond),
		dlock.WithNodeTimeout(500*time.Millisecond)) // room for a loaded machine's pauses
	if cause := waitDone(t, l.Context(), "max hold"); cause != dlock.ErrMaxHold {
		t.Fatalf("cause = %v, want ErrMaxHold", cause)
	}
	k := key(t)
	l = mustLock(t, c, k, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
	rdbs[0].Set(ctxT(t), k, "someone-else", time.Minute)
	rdbs[2].Set(ctxT(t), k, "someone-else", time.Minute)
	if cause := waitDone(t, l.Context(), "majority taken"); cause != dlock.ErrKeyLost {
		t.Fatalf("cause = %v, want ErrKeyLost", cause)
	}
}

func TestRedlockOnTwoNodesNeedsBoth(t *testing.T) {
	nodes := startNodes(t, 2)
	c, _ := newRedlock(t, nodes)
	l := mustLock(t, c, key(t))
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	nodes[1].Kill()
	if _, err := c.TryLock(ctxT(t), key(t)); !errors.Is(err, dlock.ErrNoQuorum) {
		t.Fatalf("TryLock with 1 of 2 nodes: %v, want ErrNoQuorum", err)
	}
}

// A Redlock acquire does not wait for the slowest nodes once a majority has
// granted it. A grant that comes later is part of the lock, unless an
// Extend or Unlock has begun: then it is given back, so that a release that
// overtook it leaves no key behind.
func TestRedlockLateGrantsJoinTheLockOrAreGivenBack(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	opts := []dlock.Option{dlock.WithTTL(time.Hour), dlock.WithNodeTimeout(time.Minute)}

	t.Run("late grant before Unlock is kept", func(t *testing.T) {
		k := key(t)
		nodes[4].Pause()
		l, err := c.TryLock(ctxT(t), k, opts...) // does not wait for node 4
		nodes[4].Resume()
		if err != nil {
			t.Fatal(err)
		}
		onEveryNode(t, rdbs, l) // the late grant lands and joins
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "every node is released", func() bool { return holders(t, rdbs, k, l.Token()) == 0 })
	})

	t.Run("late grant after Unlock is given back", func(t *testing.T) {
		k := key(t)
		nodes[4].Pause()
		l, err := c.TryLock(ctxT(t), k, opts...)
		if err != nil {
			nodes[4].Resume()
			t.Fatal(err)
		}
		if err := l.Unlock(ctxT(t)); err != nil { // a majority is enough
			nodes[4].Resume()
			t.Fatal(err)
		}
		nodes[4].Resume() // the acquire and the release reach node 4 in either order
		eventually(t, "no node keeps the key", func() bool {
			for _, rdb := range rdbs {
				if rdb.Exists(ctxT(t), k).Val() != 0 {
					return false
				}
			}
			return true
		})
	})
}

// A Lock unlocked before a node's grant has answered releases that node
// once, after the grant: Unlock waits for the answer instead of sending a
// release that could overtake the grant and would have to be followed by a
// give-back.
func TestRedlockUnlockBeforeALateGrantReleasesItOnce(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	warm := mustLock(t, c, k+":warm") // the scripts are loaded on every node
	onEveryNode(t, rdbs, warm)
	if err := warm.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the warm-up is released", func() bool { return holders(t, rdbs, warm.Key(), warm.Token()) == 0 })
	scripts := func() int {
		n := 0
		for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
			stat := redistest.Info(rdbs[4], "commandstats")[cmd]
			calls, _, _ := strings.Cut(strings.TrimPrefix(stat, "calls="), ",")
			m, _ := strconv.Atoi(calls)
			n += m
		}
		return n
	}
	before := scripts()
	nodes[4].Pause()
	l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Hour), dlock.WithNodeTimeout(time.Minute))
	if err == nil {
		err = l.Unlock(ctxT(t)) // a majority is enough; node 4 has not answered
	}
	nodes[4].Resume()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "no node keeps the key", func() bool { return holders(t, rdbs, k, l.Token()) == 0 })
	c.Close() // waits for the background work: a give-back would have run by now
	if got := scripts() - before; got != 2 {
		t.Fatalf("node 4 ran %d scripts for the lock; want 2, its acquire and one release", got)
	}
}

// lockAndUnlock locks key and unlocks it at once, n times over.
func lockAndUnlock(t *testing.T, c *dlock.Client, key string, n int, opts ...dlock.Option) {
	t.Helper()
	for i := 0; i < n; i++ {
		l, err := c.Lock(ctxT(t), key, opts...)
		if err != nil {
			t.Fatalf("cycle %d: Lock: %v", i, err)
		}
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatalf("cycle %d: Unlock: %v", i, err)
		}
	}
}

// A Client that locks a key again at once, on five nodes, never meets
// its own release still on its way to the slowest nodes: each acquire
// there is sent after that release has been answered. Meeting it, an
// acquire is refused on that node and leaves a listener's notify key,
// with which every acquire and release of the key there takes the full
// path and publishes, for the notify window (3 s).
func TestRedlockLockAgainAtOnceDoesNotMeetItsOwnRelease(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes)
	k := key(t)
	// A generous node timeout: under a loaded machine's stalls, 50 ms can
	// pass with no answer, which is not what this test is about.
	lockAndUnlock(t, c, k, 300, dlock.WithNodeTimeout(time.Second))
	for i, rdb := range rdbs {
		if n := rdb.Exists(ctxT(t), "dlock:notify:{"+k+"}").Val(); n != 0 {
			t.Errorf("node %d: a notify key: an acquire of the loop found the key held", i)
		}
	}
}

// The same with a node that stalls: the Unlock returns on a majority, and
// the next lock's acquire on the stalled node waits for the release there,
// so that it is granted, not refused, once the node is back.
func TestRedlockAcquireWaitsForTheReleaseOnAStalledNode(t *testing.T) {
	nodes, c, rdbs := pausableRedlock(t, 5)
	k := key(t)
	first := mustLock(t, c, k)
	onEveryNode(t, rdbs, first)
	nodes[4].Pause()
	defer nodes[4].Resume()
	if err := first.Unlock(ctxT(t)); err != nil { // a majority answers
		t.Fatal(err)
	}
	next := mustLock(t, c, k) // granted by nodes 0-3
	nodes[4].Resume()
	onEveryNode(t, rdbs, next)
	if n := rdbs[4].Exists(ctxT(t), "dlock:notify:{"+k+"}").Val(); n != 0 {
		t.Error("node 4 has a notify key: the acquire found the key held")
	}
	if err := next.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// While the node stays stalled, the next locks do not wait for it,
	// nor queue their acquires behind its releases: once it is back, all
	// is settled at once, and nothing is left on it.
	nodes[4].Pause()
	lockAndUnlock(t, c, k, 50)
	nodes[4].Resume()
	closed := make(chan error)
	go func() { closed <- c.Close() }() // waits for the background work
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return within 20 s of the node's return")
	}
	for i, rdb := range rdbs {
		if v, err := rdb.Get(ctxT(t), k).Result(); err != redis.Nil {
			t.Errorf("node %d keeps the key: %q, %v", i, v, err)
		}
	}
}

// A release that a stalled node did not answer before go-redis's read
// timeout, while the other nodes released the lock, is tried again once
// the node is back: the key does not stay there for the rest of its TTL,
// refusing every lock of the key on that node until then.
func TestRedlockReleaseThatTimedOutOnOneNodeIsTriedAgain(t *testing.T) {
	nodes := startNodes(t, 5)
	c, rdbs := newRedlock(t, nodes, func(o *redis.Options) { o.ReadTimeout = 300 * time.Millisecond })
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	onEveryNode(t, rdbs, l)
	nodes[4].Pause()
	defer nodes[4].Resume()
	if err := l.Unlock(ctxT(t)); err != nil { // four nodes released it
		t.Fatal(err)
	}
	time.Sleep(time.Second) // node 4's release times out on the client
	nodes[4].Resume()
	eventually(t, "node 4 no longer holds the key", func() bool { return holders(t, rdbs, k, l.Token()) == 0 })
}

// The most common way to build a Redlock Client, New with a
// []*redis.Client, compiles and works.
func TestNewTakesASliceOfClients(t *testing.T) {
	var rdbs []*redis.Client
	for _, s := range startNodes(t, 3) {
		rdbs = append(rdbs, s.Client(t))
	}
	c := dlock.New(rdbs...)
	defer c.Close()
	l, err := c.TryLock(ctxT(t), key(t), dlock.WithNodeTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
