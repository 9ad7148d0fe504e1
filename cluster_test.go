package dlock_test

import (
	"errors"
	"sync"
	"testing"
	"time"

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
