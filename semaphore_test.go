package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// Never more than N permit holders, however many goroutines ask; every
// permit's fence is above the fences before it.
func TestASemaphoreNeverHasMoreThanNHolders(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	const permits, goroutines, rounds = 3, 24, 8
	var inside, most atomic.Int32
	var mu sync.Mutex
	fences := map[int64]bool{}
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem := c.Semaphore(k, permits)
			for range rounds {
				l, err := sem.Acquire(ctxT(t), dlock.WithTTL(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if fences[l.Fence()] {
					t.Errorf("fence %d issued twice", l.Fence())
				}
				fences[l.Fence()] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(ctxT(t)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > permits || m < 2 {
		t.Fatalf("at most %d holders at once, want 2..%d", m, permits)
	}
	if st, err := c.Inspect(ctxT(t), k); err != nil || st.Holders != 0 || st.Held {
		t.Fatalf("after all released: %+v %v", st, err)
	}
}

// Waiters get permits in arrival order, and a crashed holder's permit
// comes back with its TTL.
func TestSemaphorePermitsGoInArrivalOrderAndExpire(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	sem := c.Semaphore(k, 2)
	a, err := sem.TryAcquire(ctxT(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := sem.TryAcquire(ctxT(t), dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctxT(t)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a third permit of two: %v", err)
	}
	_ = crashed // never released: it expires
	order := make(chan int, 3)
	for i := range 3 {
		other, _ := newClient(t, shared())
		go func() {
			l, err := other.Semaphore(k, 2).Acquire(ctxT(t), dlock.WithTTL(time.Minute))
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			time.Sleep(50 * time.Millisecond)
			l.Unlock(ctxT(t))
		}()
		eventually(t, "queued", func() bool { st, _ := c.Inspect(ctxT(t), k); return st.Waiters == i+1 })
	}
	// The crashed permit's TTL frees one place: the first waiter gets it.
	if got := <-order; got != 0 {
		t.Fatalf("first served: %d, want 0", got)
	}
	a.Unlock(ctxT(t))
	for want := 1; want < 3; want++ {
		if got := <-order; got != want {
			t.Fatalf("served %d, want %d", got, want)
		}
	}
}

func TestSemaphoreBadInputAndKinds(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	if _, err := c.Semaphore(k, 0).TryAcquire(ctxT(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("0 permits: %v", err)
	}
	if _, err := c.Semaphore("", 1).Acquire(ctxT(t)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("empty key: %v", err)
	}
	l, err := c.Semaphore(k, 3).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctxT(t))
	if _, err := c.Semaphore(k, 2).TryAcquire(ctxT(t)); !errors.Is(err, dlock.ErrPermitMismatch) {
		t.Fatalf("other permits: %v, want ErrPermitMismatch", err)
	}
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("TryLock on a semaphore's key: %v, want ErrWrongKind", err)
	}
	if _, err := c.RWMutex(k).TryRLock(ctxT(t)); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("TryRLock on a semaphore's key: %v, want ErrWrongKind", err)
	}
	m := key(t)
	ml := mustLock(t, c, m)
	defer ml.Unlock(ctxT(t))
	if _, err := c.Semaphore(m, 2).TryAcquire(ctxT(t)); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("TryAcquire on a lock's key: %v, want ErrWrongKind", err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	if _, err := c.Semaphore(m, 2).Acquire(ctx); !errors.Is(err, dlock.ErrWrongKind) {
		t.Fatalf("Acquire on a lock's key: %v, want ErrWrongKind", err)
	}
	rl, _ := newRedlock(t, startNodes(t, 3))
	if _, err := rl.Semaphore(k, 2).TryAcquire(ctxT(t)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a Redlock semaphore: %v, want ErrUnsupported", err)
	}
}

// A permit is a Lock: Extend, TTL and the watchdog work on it.
func TestAPermitIsALock(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	l, err := c.Semaphore(k, 2).TryAcquire(ctxT(t), dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // three TTLs: the watchdog renews
	if d, err := l.TTL(ctxT(t)); err != nil || d <= 0 {
		t.Fatalf("TTL after renewals: %v %v", d, err)
	}
	if err := l.Extend(ctxT(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	if d, err := l.TTL(ctxT(t)); err != nil || d < 30*time.Second {
		t.Fatalf("TTL after Extend: %v %v", d, err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v", err)
	}
}

// Inspect says what kind of lock holds a key.
func TestInspectTellsTheKinds(t *testing.T) {
	c, _ := newClient(t, shared())
	base := key(t)
	sem := c.Semaphore(base+":sem", 3)
	p1, _ := sem.TryAcquire(ctxT(t))
	p2, _ := sem.TryAcquire(ctxT(t))
	defer p1.Unlock(ctxT(t))
	defer p2.Unlock(ctxT(t))
	r, _ := c.RWMutex(base + ":rw").RLock(ctxT(t))
	defer r.Unlock(ctxT(t))
	w, _ := c.RWMutex(base + ":w").Lock(ctxT(t))
	defer w.Unlock(ctxT(t))
	e, _ := c.Election(base+":e").Campaign(ctxT(t), "host-1")
	defer e.Unlock(ctxT(t))
	l := mustLock(t, c, base+":l")
	defer l.Unlock(ctxT(t))
	for k, want := range map[string]dlock.Status{
		base + ":sem": {Kind: "semaphore", Permits: 3, Holders: 2},
		base + ":rw":  {Kind: "rwmutex", Mode: "read", Holders: 1},
		base + ":w":   {Kind: "rwmutex", Mode: "write", Holders: 1},
		base + ":e":   {Kind: "election", Leader: "host-1", Holders: 1},
		base + ":l":   {Kind: "lock", Holders: 1},
	} {
		st, err := c.Inspect(ctxT(t), k)
		if err != nil || !st.Held || st.Kind != want.Kind || st.Mode != want.Mode || st.Permits != want.Permits || st.Holders != want.Holders || st.Leader != want.Leader {
			t.Errorf("%s: %+v %v, want %+v", k, st, err, want)
		}
	}
}

// The key of a semaphore lives as long as its longest holder left: a
// long permit given back leaves the key to expire with the short one that
// crashed, and then a Lock may take it.
func TestASemaphoreKeyExpiresWithItsLastHolder(t *testing.T) {
	c, admin := newClient(t, shared())
	k := key(t)
	sem := c.Semaphore(k, 2)
	long, err := sem.TryAcquire(ctxT(t), dlock.WithTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctxT(t), dlock.WithTTL(100*time.Millisecond)); err != nil { // never released
		t.Fatal(err)
	}
	if err := long.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if d := admin.PTTL(ctxT(t), k).Val(); d > time.Second {
		t.Fatalf("the key's TTL after the long permit left: %v", d)
	}
	eventually(t, "a Lock takes the key once the crashed permit expired", func() bool {
		l, err := c.TryLock(ctxT(t), k)
		if err == nil {
			l.Unlock(ctxT(t))
		}
		return err == nil
	})
}

// Unlock of a hold whose key another kind of lock took since is
// ErrNotHeld, as for a lock someone else holds now.
func TestUnlockAfterAnotherKindTookTheKeyIsNotHeld(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	p, err := c.Semaphore(k, 2).TryAcquire(ctxT(t), dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var l *dlock.Lock
	eventually(t, "a Lock takes the key", func() bool { l, err = c.TryLock(ctxT(t), k); return err == nil })
	defer l.Unlock(ctxT(t))
	if err := p.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired permit: %v, want ErrNotHeld", err)
	}
	if st, _ := c.Inspect(ctxT(t), k); !st.Held || st.Kind != "lock" {
		t.Fatalf("the Lock's key after the permit's Unlock: %+v", st)
	}
	m := key(t)
	ml, err := c.TryLock(ctxT(t), m, dlock.WithTTL(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var sp *dlock.Lock
	eventually(t, "a permit takes the key", func() bool { sp, err = c.Semaphore(m, 2).TryAcquire(ctxT(t)); return err == nil })
	defer sp.Unlock(ctxT(t))
	if err := ml.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired Lock: %v, want ErrNotHeld", err)
	}
}

// Permits' holders stay apart in logs: the kind is kept, and six
// characters of the random part.
func TestPermitsAreToldApartInStatusAndLogs(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	sem := c.Semaphore(k, 100)
	a, _ := sem.TryAcquire(ctxT(t))
	b, _ := sem.TryAcquire(ctxT(t))
	defer a.Unlock(ctxT(t))
	defer b.Unlock(ctxT(t))
	if a.String() == b.String() {
		t.Fatalf("two permits print alike: %s", a)
	}
	if !strings.Contains(a.String(), "~s100~") || strings.Contains(a.String(), a.Token()) {
		t.Fatalf("a permit prints as %s", a)
	}
}

// queueAliveWaiter puts a waiter with token into key's queue, first in
// line, as a live Client's acquire would: its record is alive for a minute
// (internal/wait/scripts/line.lua has the line's layout).
func queueAliveWaiter(t *testing.T, rdb *redis.Client, k, id, token string) {
	t.Helper()
	now := rdb.Time(ctxT(t)).Val()
	q, ws := "dlock:queue:{"+k+"}", "dlock:waiters:{"+k+"}"
	rdb.ZAdd(ctxT(t), q, redis.Z{Score: 1, Member: id})
	rdb.HSet(ctxT(t), ws, id, fmt.Sprintf("%s 60000 %d 0", token, now.Add(time.Minute).UnixMilli()))
}

// usageError fails the test unless err is a usage error matching want: not
// a *NodeError (Redis is fine), and without a script's sha or Lua line.
func usageError(t *testing.T, what string, err, want error) {
	t.Helper()
	var ne *dlock.NodeError
	switch {
	case !errors.Is(err, want):
		t.Fatalf("%s: %v, want %v", what, err, want)
	case errors.As(err, &ne):
		t.Fatalf("%s: %v is a *NodeError", what, err)
	case strings.Contains(err.Error(), "script") || strings.Contains(err.Error(), "@user"):
		t.Fatalf("%s: %q shows the script", what, err)
	}
}

// A waiter asking for other permits than the holders', first in line, is
// dropped from the line by the next acquire (its own would tell it): the
// holders' releases succeed, the waiters behind it are served, and nothing
// raises after a script has written.
func TestAMisconfiguredWaiterDoesNotFailTheHoldersReleases(t *testing.T) {
	for _, bad := range []string{"~s4~misconfigured", "~r~reader"} {
		t.Run(bad, func(t *testing.T) {
			a, rdb := newClient(t, shared())
			b, _ := newClient(t, shared())
			k := key(t)
			sem := a.Semaphore(k, 3)
			var holders []*dlock.Lock
			for range 3 {
				l, err := sem.TryAcquire(ctxT(t), dlock.WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				holders = append(holders, l)
			}
			queueAliveWaiter(t, rdb, k, "bad", bad)
			got := make(chan *dlock.Lock, 1)
			go func() {
				l, err := b.Semaphore(k, 3).Acquire(ctxT(t), dlock.WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			// The good waiter's acquire queues it and drops the misconfigured
			// one, whose own acquire would be told why.
			eventually(t, "the good waiter is queued", func() bool {
				return queueLen(t, rdb, k) == 1 && rdb.ZScore(ctxT(t), "dlock:queue:{"+k+"}", "bad").Err() == redis.Nil
			})
			for i, h := range holders {
				if err := h.Unlock(ctxT(t)); err != nil {
					t.Fatalf("holder %d's Unlock: %v", i, err)
				}
			}
			l := <-got
			if l == nil {
				t.Fatal("the waiter behind the misconfigured one was not served")
			}
			if err := l.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Semaphore(k, 4) that joins a line of Semaphore(k, 3) waiters while the
// key is empty is queued; once the others hold, it alone gets
// ErrPermitMismatch, at its next acquire (its keepalive).
func TestAMisconfiguredWaiterIsToldAtItsRollCall(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	queueAliveWaiter(t, rdb, k, "first", "~s3~first")
	ctx, cancel := context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		_, err := c.Semaphore(k, 4).Acquire(ctx)
		got <- err
	}()
	eventually(t, "the misconfigured waiter is queued", func() bool { return queueLen(t, rdb, k) == 2 })
	// The first in line takes its permit, as its own acquire would.
	rdb.ZAdd(ctxT(t), k, redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: "~s3~first"})
	rdb.PExpire(ctxT(t), k, time.Minute)
	err := <-got
	usageError(t, "the misconfigured waiter", err, dlock.ErrPermitMismatch)
	if ctx.Err() != nil {
		t.Fatalf("told only when its context ended: %v", err)
	}
}

// A plain Lock on a semaphore's key, from a Client that already waits
// there (so it makes no first attempt and goes straight to the queue),
// is told ErrWrongKind at its join, before anything is written, and holds
// none of the semaphore's own waiters up (found by review: it queued
// silently, and a free permit then waited behind it).
func TestAMutexWaiterOnASemaphoresKeyIsToldAndHoldsNobodyUp(t *testing.T) {
	a, _ := newClient(t, shared())
	c, _ := newClient(t, shared())
	d, _ := newClient(t, shared())
	k := key(t)
	ttl := dlock.WithTTL(time.Minute)
	var permits []*dlock.Lock
	for range 2 {
		p, err := a.Semaphore(k, 2).TryAcquire(ctxT(t), ttl)
		if err != nil {
			t.Fatal(err)
		}
		permits = append(permits, p)
	}
	acquire := func(c *dlock.Client) chan error {
		done := make(chan error, 1)
		go func() {
			l, err := c.Semaphore(k, 2).Acquire(ctxT(t), ttl)
			if err == nil {
				err = l.Unlock(ctxT(t))
			}
			done <- err
		}()
		return done
	}
	first := acquire(c)
	eventually(t, "the semaphore's waiter queues", func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == 1
	})
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, k, ttl); !errors.Is(err, dlock.ErrWrongKind) || ctx.Err() != nil {
		t.Fatalf("Lock on a semaphore's key: %v, want ErrWrongKind at once", err)
	}
	second := acquire(d)
	eventually(t, "the second waiter queues", func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == 2
	})
	for i, done := range []chan error{first, second} {
		if err := permits[i].Unlock(ctxT(t)); err != nil {
			t.Fatalf("holder %d's Unlock: %v", i, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("semaphore waiter %d: %v", i, err)
		}
	}
}

// Unlock of a permit or read hold that expired while another hold kept the
// key is ErrNotHeld, as for a mutex, and its Context says it was lost, not
// released (found by review: the line's release took the expired member).
func TestUnlockOfAnExpiredSharedHoldIsNotHeld(t *testing.T) {
	for _, kind := range []string{"semaphore", "read"} {
		t.Run(kind, func(t *testing.T) {
			c, _ := newClient(t, shared())
			k := key(t)
			take := func(ttl time.Duration) *dlock.Lock {
				try := c.RWMutex(k).TryRLock
				if kind == "semaphore" {
					try = c.Semaphore(k, 2).TryAcquire
				}
				l, err := try(ctxT(t), dlock.WithTTL(ttl))
				if err != nil {
					t.Fatal(err)
				}
				return l
			}
			short := take(100 * time.Millisecond)
			long := take(time.Minute)
			defer long.Unlock(context.Background())
			eventually(t, "the short hold's lease ends", func() bool { return short.Context().Err() != nil })
			time.Sleep(50 * time.Millisecond) // and its key's score, past the drift margin
			if err := short.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Unlock of a %s hold that expired: %v, want ErrNotHeld", kind, err)
			}
			if cause := context.Cause(short.Context()); errors.Is(cause, dlock.ErrReleased) {
				t.Fatalf("the expired hold's Context says %v", cause)
			}
		})
	}
}
