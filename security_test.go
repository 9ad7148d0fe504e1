package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// minimalACL is docs/operating.md's ACL for a user that may lock keys lock:* and
// nothing else. Keep the two in step.
var minimalACL = []any{"ACL", "SETUSER", "locker", "on", ">s3cret",
	"resetkeys", "~lock:*", "~dlock:*{lock:*",
	"resetchannels", "&dlock:wake:{lock:*", "&dlock:elect:{lock:*",
	"-@all", "+@connection",
	"+evalsha", "+eval", "+script|load", "+command|info", "+wait", "+scan", "+multi", "+exec", "+hvals",
	"+subscribe", "+unsubscribe", "+ssubscribe", "+sunsubscribe", "+publish", "+spublish",
	"+get", "+set", "+del", "+exists", "+pttl", "+pexpire", "+time",
	"+zrange", "+zadd", "+zrem", "+zcard", "+zscore", "+hget", "+hmget", "+hset", "+hdel",
	"+zrangebyscore", "+zremrangebyscore", "+zcount", "+pexpireat"}

func TestARestrictedACLUserCanLockItsKeysAndNothingElse(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	if err := s.Client(t).Do(ctxT(t), minimalACL...).Err(); err != nil {
		t.Fatal(err)
	}
	opts := s.Options()
	opts.Username, opts.Password = "locker", "s3cret"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	other := dlock.New(s.Client(t))
	t.Cleanup(func() { other.Close() })

	k := "lock:" + key(t)
	l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("TryLock as the restricted user: %v", err)
	}
	// A queued waiter, a hand-off, renewal, inspection: all within the ACL.
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
		if err == nil {
			err = w.Unlock(ctxT(t))
		}
		got <- err
	}()
	if err := l.Extend(ctxT(t), 2*time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if _, err := c.Inspect(ctxT(t), k); err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	eventually(t, "the waiter is queued", func() bool {
		st, _ := other.Inspect(ctxT(t), k)
		return st.Waiters == 1
	})
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}

	// A semaphore, a read-write lock and an election, within the ACL too.
	sem, err := c.Semaphore("lock:sem:"+key(t), 2).TryAcquire(ctxT(t))
	if err != nil {
		t.Fatalf("a semaphore permit as the restricted user: %v", err)
	}
	if _, err := c.Inspect(ctxT(t), sem.Key()); err != nil {
		t.Fatalf("Inspect of a semaphore: %v", err)
	}
	if err := sem.Extend(ctxT(t), time.Minute); err != nil {
		t.Fatalf("Extend of a permit: %v", err)
	}
	sem.Unlock(ctxT(t))
	rw := c.RWMutex("lock:rw:" + key(t))
	r, err := rw.RLock(ctxT(t))
	if err != nil {
		t.Fatalf("a read hold as the restricted user: %v", err)
	}
	r.Unlock(ctxT(t))
	w, err := rw.Lock(ctxT(t))
	if err != nil {
		t.Fatalf("a write hold as the restricted user: %v", err)
	}
	w.Unlock(ctxT(t))
	e := c.Election("lock:elect:" + key(t))
	obs := e.Observe(ctxT(t)).C
	<-obs
	lead, err := e.Campaign(ctxT(t), "me")
	if err != nil {
		t.Fatalf("a campaign as the restricted user: %v", err)
	}
	if ld := <-obs; ld.Value != "me" {
		t.Fatalf("observed %+v as the restricted user", ld)
	}
	lead.Unlock(ctxT(t))

	// Outside its key pattern: a clear NOPERM, never "held by someone".
	_, err = c.TryLock(ctxT(t), "other:"+key(t))
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || !strings.Contains(err.Error(), "NOPERM") || errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryLock outside the ACL: %v, want a NOPERM *NodeError", err)
	}
}

func TestLocksOverTLSWithAPassword(t *testing.T) {
	s, _ := redistest.StartTLS(t, "--requirepass", "s3cretpw")
	opts := s.Options()
	opts.Password = "s3cretpw"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	l, err := c.Lock(ctxT(t), key(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("Lock over TLS: %v", err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	// A wrong password is a clear failure, not contention, and is not echoed.
	opts.Password = "wrong-pw"
	bad := redis.NewClient(opts)
	t.Cleanup(func() { bad.Close() })
	_, err = dlock.New(bad).TryLock(ctxT(t), key(t))
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || errors.Is(err, dlock.ErrNotObtained) || strings.Contains(err.Error(), "wrong-pw") {
		t.Fatalf("TryLock with a wrong password: %v", err)
	}
}
