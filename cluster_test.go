package dlock_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestClusterLocksWithTrickyKeys(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := dlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	other := dlock.New(cl.Client(t))
	t.Cleanup(func() { other.Close() })

	for _, k := range []string{"x{}y", "{a}b", "a{b}c{d}", "{", "}{", "order:1001", "lock:{user:42}"} {
		l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatalf("TryLock(%q): %v", k, err)
		}
		if _, err := other.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("%q: second TryLock: %v, want ErrNotObtained", k, err)
		}
		if err := l.Extend(ctxT(t), 2*time.Minute); err != nil {
			t.Errorf("%q: Extend: %v", k, err)
		}
		if d, err := l.TTL(ctxT(t)); err != nil || d <= time.Minute {
			t.Errorf("%q: TTL = %v, %v", k, d, err)
		}

		// A waiter on another Client gets the lock when it is released.
		var wg sync.WaitGroup
		wg.Add(1)
		var next *dlock.Lock
		go func() {
			defer wg.Done()
			var err error
			if next, err = other.Lock(ctxT(t), k); err != nil {
				t.Errorf("%q: Lock: %v", k, err)
			}
		}()
		time.Sleep(20 * time.Millisecond)
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatalf("%q: Unlock: %v", k, err)
		}
		wg.Wait()
		if next == nil || next.Fence() <= l.Fence() {
			t.Fatalf("%q: waiter got %v after fence %d", k, next, l.Fence())
		}
		if err := next.Unlock(ctxT(t)); err != nil {
			t.Errorf("%q: Unlock: %v", k, err)
		}
	}
}

// On a cluster, a Client's waiters on many keys share one sharded
// subscription per master: the pub/sub connections do not grow with the
// keys (nor the waiters), and every waiter is served.
func TestClusterWaitersShareOneSubscriptionPerShard(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	holders := dlock.New(cl.Client(t))
	t.Cleanup(func() { holders.Close() })
	c := dlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	const keys, perKey = 24, 5
	var held []*dlock.Lock
	for i := 0; i < keys; i++ {
		held = append(held, mustLock(t, holders, fmt.Sprintf("shard:%d", i), dlock.WithTTL(time.Minute)))
	}
	var wg sync.WaitGroup
	for i := 0; i < keys; i++ {
		for j := 0; j < perKey; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Lock(ctxT(t), fmt.Sprintf("shard:%d", i), dlock.WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				_ = l.Unlock(ctxT(t))
			}()
		}
	}
	pubsubs := func() (most int) {
		for _, addr := range cl.Addrs() {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			list, _ := rdb.ClientList(ctxT(t)).Result()
			rdb.Close()
			n := strings.Count(list, "flags=P")
			most = max(most, n)
		}
		return most
	}
	eventually(t, "every waiter queued", func() bool {
		n := 0
		for i := 0; i < keys; i++ {
			st, _ := holders.Inspect(ctxT(t), fmt.Sprintf("shard:%d", i))
			n += st.Waiters
		}
		return n == keys*perKey
	})
	if n := pubsubs(); n > 1 {
		t.Errorf("a master has %d pub/sub connections for %d keys waited on, want 1", n, keys)
	}
	for _, l := range held {
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// LockAll on a cluster: keys in different slots, each locked on its own.
func TestClusterLockAllAcrossSlots(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := dlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	keys := []string{"stock:1", "stock:2", "stock:3", "stock:4", "stock:5"}
	locks, err := c.LockAll(ctxT(t), keys)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UnlockAll(ctxT(t), locks); err != nil {
		t.Fatal(err)
	}
	l, err := c.Election("leader:{jobs}").Campaign(ctxT(t), "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if ld, err := c.Election("leader:{jobs}").Leader(ctxT(t)); err != nil || ld.Value != "node-1" || ld.Term != l.Fence() {
		t.Fatalf("Leader on a cluster: %+v %v", ld, err)
	}
	l.Unlock(ctxT(t))
}

// Semaphores and read-write locks on a cluster: the key, its queue and its
// holders' fences share a slot whatever braces the key holds.
func TestClusterSemaphoreAndRWMutex(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := dlock.New(cl.Client(t))
	t.Cleanup(func() { c.Close() })
	for _, k := range []string{"sem:{a}b", "x{}y", "plain-sem"} {
		sem := c.Semaphore(k, 2)
		a, err := sem.TryAcquire(ctxT(t))
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		b, err := sem.TryAcquire(ctxT(t))
		if err != nil {
			t.Fatalf("%q: %v", k, err)
		}
		got := make(chan *dlock.Lock, 1)
		go func() {
			l, err := sem.Acquire(ctxT(t))
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(20 * time.Millisecond)
		a.Unlock(ctxT(t))
		third := <-got
		if third == nil || third.Fence() <= b.Fence() {
			t.Fatalf("%q: the waiter got %v", k, third)
		}
		b.Unlock(ctxT(t))
		third.Unlock(ctxT(t))
	}
	m := c.RWMutex("rw:{cache}")
	r, err := m.RLock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	r.Unlock(ctxT(t))
	w, err := m.Lock(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	w.Unlock(ctxT(t))
}

// wrappedClient hides a client's type, as a user's instrumenting wrapper
// does: dlock cannot tell a cluster behind it.
type wrappedClient struct{ redis.UniversalClient }

// Inspect on a cluster client behind a wrapper reads the key's master, as
// on the cluster client itself, for every kind and RESP version, and
// leaves no connection inside a transaction (found by review: its MULTI,
// EXEC and TIME went to other masters than its reads, left a connection in
// MULTI and failed every later call).
func TestClusterInspectThroughAWrapper(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	for _, protocol := range []int{2, 3} {
		rdb := cl.Client(t)
		rdb.Options().Protocol = protocol
		c := dlock.New(wrappedClient{rdb})
		t.Cleanup(func() { c.Close() })
		for i, k := range []string{"lock:a", "lock:b", "sem:{x}", "x{}y", "plain"} {
			k := fmt.Sprintf("%s:%d:%d", k, protocol, i)
			l := mustLock(t, c, k)
			sem, err := c.Semaphore(k+":sem", 2).TryAcquire(ctxT(t))
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				if st, err := c.Inspect(ctxT(t), k); err != nil || !st.Held || st.Kind != "lock" || st.Fence != l.Fence() {
					t.Fatalf("RESP%d %q: %+v, %v; want held by the lock", protocol, k, st, err)
				}
				if st, err := c.Inspect(ctxT(t), sem.Key()); err != nil || !st.Held || st.Kind != "semaphore" || st.Holders != 1 {
					t.Fatalf("RESP%d %q: %+v, %v; want one permit held", protocol, sem.Key(), st, err)
				}
			}
		}
	}
}
