package dlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The seeds' experiment 6.1, at scale: goroutines with their own connections
// never overlap in the critical section, and every grant's fence is above
// the one before it.
func TestManyClientsNeverOverlapAndFencesIncrease(t *testing.T) {
	var clients []*dlock.Client
	for w := 0; w < 8; w++ {
		c, _ := newClient(t, shared())
		clients = append(clients, c)
	}
	checkExclusion(t, clients, 25)
}

// checkExclusion runs each client in its own goroutine through rounds of
// Lock, critical section, Unlock on one key, and fails the test if two are
// ever inside at once, if a fence does not grow, or if a grant is missing.
// opts are given to every Lock.
func checkExclusion(t *testing.T, clients []*dlock.Client, rounds int, opts ...dlock.Option) {
	t.Helper()
	k := key(t)
	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastFence int64
		grants    int
		wg        sync.WaitGroup
	)
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				l, err := c.Lock(ctxT(t), k, append([]dlock.Option{dlock.WithTTL(time.Minute)}, opts...)...)
				if err != nil {
					t.Error(err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("%d holders at once", n)
				}
				mu.Lock()
				if l.Fence() <= lastFence {
					t.Errorf("fence %d after %d: not increasing", l.Fence(), lastFence)
				}
				lastFence = l.Fence()
				grants++
				mu.Unlock()
				inside.Add(-1)
				if err := l.Unlock(ctxT(t)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if grants != len(clients)*rounds {
		t.Errorf("%d grants, want %d", grants, len(clients)*rounds)
	}
}

func TestFenceStillGrowsAfterFlushAll(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	k := key(t)
	var last int64
	for i := 0; i < 3; i++ {
		l := mustLock(t, c, k)
		if l.Fence() <= last {
			t.Fatalf("round %d: fence %d after %d", i, l.Fence(), last)
		}
		last = l.Fence()
		// The holder's data is lost, counter and all, while it holds.
		if err := rdb.FlushAll(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFenceStillGrowsAfterRestartWithoutPersistence(t *testing.T) {
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	k := key(t)
	before := mustLock(t, c, k)
	s.Kill()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	var after *dlock.Lock
	eventually(t, "the restarted server grants the lock", func() bool {
		l, err := c.TryLock(ctxT(t), k)
		after = l
		return err == nil
	})
	if after.Fence() <= before.Fence() {
		t.Fatalf("fence after restart %d <= fence before %d", after.Fence(), before.Fence())
	}
}

// The seeds' failover scenario: the master grants a lock, dies before its
// replica has it, the replica is promoted and grants the same lock again.
// Two clients now believe they hold it; the fence tells the resource which
// one is current.
func TestFenceRefusesTheStaleHolderAfterFailoverToALaggingReplica(t *testing.T) {
	stale, current := failoverToALaggingReplica(t, key(t))
	if current.Fence() <= stale.Fence() {
		t.Fatalf("new master's fence %d <= old master's %d: a resource could not refuse the stale holder", current.Fence(), stale.Fence())
	}
}

// failoverToALaggingReplica makes the seeds' double holder: a master
// grants the lock on k, dies before its replica has the grant, and the
// promoted replica grants it again. It returns both holders.
func failoverToALaggingReplica(t *testing.T, k string) (stale, current *dlock.Lock) {
	t.Helper()
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	mc, mrdb := newClient(t, master)
	rc, rrdb := newClient(t, replica)

	// Let the counter reach the replica, so that it has an old value.
	warm := mustLock(t, mc, k)
	if err := warm.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := mrdb.Do(ctxT(t), "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	// Cut replication, then let the master grant the lock: the replica
	// never sees this grant.
	if err := rrdb.Do(ctxT(t), "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	stale = mustLock(t, mc, k, dlock.WithTTL(time.Minute))
	master.Kill()
	if err := rrdb.Do(ctxT(t), "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	return stale, mustLock(t, rc, k, dlock.WithTTL(time.Minute)) // a second holder: the lock's known limit
}

func TestFenceCounterHasAnExpiry(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k)
	ctx := context.Background()
	var fenceKeys []string
	for _, name := range everything(t, rdb, k) {
		if strings.HasPrefix(name, "dlock:fence:") {
			fenceKeys = append(fenceKeys, name)
		}
	}
	if len(fenceKeys) != 1 {
		t.Fatalf("found fence keys %q, want one", fenceKeys)
	}
	if pttl := rdb.PTTL(ctx, fenceKeys[0]).Val(); pttl <= 0 {
		t.Errorf("fence counter PTTL = %v, want an expiry", pttl)
	}
}

// everything returns the keys dlock keeps for lock key k (and k itself).
func everything(t *testing.T, rdb *redis.Client, k string) []string {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := rdb.Scan(ctx, 0, "*"+k[len("lock:"):]+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("SCAN: %v", err)
	}
	return keys
}

func TestAReleasedLockLeavesNothingBeyondItsTTLPlusTheFenceMargin(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	const ttl, margin = time.Second, 2 * time.Second
	opts := []dlock.Option{dlock.WithTTL(ttl), dlock.WithFenceMargin(margin)}
	l := mustLock(t, c, k, opts...)
	waited := make(chan error, 1)
	go func() { // a waiter, so that the queue's keys exist too
		w, err := c.Lock(ctxT(t), k, opts...)
		if err == nil {
			err = w.Unlock(ctxT(t))
		}
		waited <- err
	}()
	eventually(t, "the waiter queued", func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == 1
	})
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	keys := everything(t, rdb, k)
	if len(keys) == 0 {
		t.Fatal("no fence counter left at all")
	}
	for _, name := range keys {
		if pttl := rdb.PTTL(context.Background(), name).Val(); pttl <= 0 || pttl > ttl+margin {
			t.Errorf("%s: PTTL %v, want an expiry within the TTL plus the margin (%v)", name, pttl, ttl+margin)
		}
	}
}

func TestFenceStillGrowsAfterItsCounterExpired(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	opts := []dlock.Option{dlock.WithTTL(200 * time.Millisecond), dlock.WithFenceMargin(0)}
	l := mustLock(t, c, k, opts...)
	first := l.Fence()
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the counter expires", func() bool { return len(everything(t, rdb, k)) == 0 })
	if l2 := mustLock(t, c, k, opts...); l2.Fence() <= first {
		t.Fatalf("fence %d after the counter expired, want above %d", l2.Fence(), first)
	}
}

func TestFenceMarginOutOfRangeIsRefused(t *testing.T) {
	c, _ := newClient(t, shared())
	for _, d := range []time.Duration{-time.Second, dlock.MaxFenceMargin + time.Second} {
		if _, err := c.TryLock(ctxT(t), key(t), dlock.WithFenceMargin(d)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("WithFenceMargin(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
}

// After a failover to a replica that never saw the last grant, two hold
// the lock; the new master's fence is higher, so the old holder's write is
// refused by a resource on another deployment.
func TestTheGuardRefusesTheStaleHolderAfterAFailover(t *testing.T) {
	g := guard.NewRedis(shared().Client(t))
	k, res := key(t), key(t)+":stock"
	stale, current := failoverToALaggingReplica(t, k)
	if _, err := g.For(current).HSet(ctxT(t), res, "sku-1", 9); err != nil {
		t.Fatal(err)
	}
	if _, err := g.HSet(ctxT(t), res, stale.Fence(), "sku-1", 10); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("the old master's holder wrote: %v", err)
	}
}

// Fences are numbered per lock key: a resource written under two locks
