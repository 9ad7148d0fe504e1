package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

func TestLockWaitsForTheHolderToUnlock(t *testing.T) {
	holderC, _ := newClient(t, shared)
	waiterC, _ := newClient(t, shared)
	k := key(t)
	holder := mustLock(t, holderC, k, dlock.WithTTL(time.Minute))

	got := make(chan *dlock.Lock, 1)
	go func() {
		l, err := waiterC.Lock(ctxT(t), k)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("Lock returned while the lock was held")
	case <-time.After(50 * time.Millisecond):
	}
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	// The TTL is a minute: only the release (notified or retried) can
	// hand the lock over within the test's deadline.
	select {
	case l := <-got:
		if l == nil || l.Fence() <= holder.Fence() {
			t.Fatalf("waiter got %v", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter did not get the lock after Unlock")
	}
}

func TestLockWaitsForAnExpiringHolder(t *testing.T) {
	c, _ := newClient(t, shared)
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(200*time.Millisecond)) // never unlocked
	l, err := c.Lock(ctxT(t), k)
	if err != nil {
		t.Fatalf("Lock after the holder's TTL: %v", err)
	}
	_ = l.Unlock(ctxT(t))
}

func TestLockWaitsForAKeySetByHand(t *testing.T) {
	c, rdb := newClient(t, shared)
	k := key(t)
	rdb.Set(ctxT(t), k, "by-hand", 0) // no expiry: only a DEL frees it
	go func() {
		time.Sleep(100 * time.Millisecond)
		rdb.Del(context.Background(), k)
	}()
	if _, err := c.Lock(ctxT(t), k); err != nil {
		t.Fatalf("Lock: %v", err)
	}
}

func TestLockGivesUpWhenTheContextEnds(t *testing.T) {
	c, _ := newClient(t, shared)
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, k)
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an ended context: %v, want ErrNotObtained and DeadlineExceeded", err)
	}
}

func TestLockWithCanceledContextDoesNotTry(t *testing.T) {
	c, rdb := newClient(t, shared)
	k := key(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, f := range map[string]func() (*dlock.Lock, error){
		"Lock":    func() (*dlock.Lock, error) { return c.Lock(ctx, k) },
		"TryLock": func() (*dlock.Lock, error) { return c.TryLock(ctx, k) },
	} {
		if _, err := f(); !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("%s: %v, want ErrNotObtained and Canceled", name, err)
		}
	}
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Error("a canceled call left the key set")
	}
}

func TestLockReturnsWhenTheClientCloses(t *testing.T) {
	holderC, _ := newClient(t, shared)
	waiterC, _ := newClient(t, shared)
	k := key(t)
	mustLock(t, holderC, k, dlock.WithTTL(time.Minute))
	errc := make(chan error, 1)
	go func() {
		_, err := waiterC.Lock(ctxT(t), k)
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	waiterC.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("Lock on a closed client: %v, want ErrNotObtained and ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Lock did not return after Close")
	}
}

func TestCallsAfterCloseReturnErrClosed(t *testing.T) {
	c, _ := newClient(t, shared)
	l := mustLock(t, c, key(t))
	c.Close()
	if _, err := c.TryLock(ctxT(t), key(t)); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
	// Locks already held can still be released.
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
}

func TestManyWaitersAllGetTheLockInTurn(t *testing.T) {
	const waiters = 10
	c, _ := newClient(t, shared) // one Client: its waiters share one subscription
	k := key(t)
	first := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	done := make(chan error, waiters)
	for i := 0; i < waiters; i++ {
		go func() {
			l, err := c.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
			if err == nil {
				err = l.Unlock(ctxT(t))
			}
			done <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	if err := first.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < waiters; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of %d waiters got the lock", i, waiters)
		}
	}
}
