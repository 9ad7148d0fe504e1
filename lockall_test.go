package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Callers naming the same keys in opposite orders never deadlock, and each
// key has one holder at a time.
func TestLockAllInOppositeOrdersNeverDeadlocks(t *testing.T) {
	base := key(t)
	keys := []string{base + ":a", base + ":b", base + ":c", base + ":d"}
	reversed := slices.Clone(keys)
	slices.Reverse(reversed)
	var held [4]atomic.Int32
	index := map[string]int{}
	for i, k := range keys {
		index[k] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 {
		c, _ := newClient(t, shared())
		order := keys
		if g%2 == 1 {
			order = reversed
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				locks, err := c.LockAll(ctx, order, dlock.WithTTL(10*time.Second))
				if err != nil {
					t.Errorf("LockAll: %v (a deadlock would end with the minute)", err)
					return
				}
				for i, l := range locks {
					if l.Key() != order[i] {
						t.Errorf("lock %d is %q, want %q", i, l.Key(), order[i])
					}
					if held[index[l.Key()]].Add(1) != 1 {
						t.Errorf("two holders of %q", l.Key())
					}
				}
				for _, l := range locks {
					held[index[l.Key()]].Add(-1)
				}
				if err := c.UnlockAll(ctx, locks); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
}

// All or nothing: when one key cannot be had, the others are released at
// once, and the error names the key.
func TestLockAllReleasesWhatItGotWhenOneKeyIsTaken(t *testing.T) {
	c, _ := newClient(t, shared())
	other, _ := newClient(t, shared())
	base := key(t)
	keys := []string{base + ":1", base + ":2", base + ":3"}
	blocker := mustLock(t, other, keys[2], dlock.WithTTL(time.Minute))
	defer blocker.Unlock(ctxT(t))
	ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
	defer cancel()
	locks, err := c.LockAll(ctx, keys, dlock.WithTTL(time.Minute))
	if locks != nil || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockAll with a key taken: %v, %v", locks, err)
	}
	if want := fmt.Sprintf("%q", keys[2]); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name %s", err, want)
	}
	for _, k := range keys[:2] {
		if st, err := c.Inspect(ctxT(t), k); err != nil || st.Held {
			t.Fatalf("%q still held after a failed LockAll: %+v %v", k, st, err)
		}
	}
}

// UnlockAll, LockAll's counterpart on the Client, releases every lock it is
// given, skipping nil ones, even when one of them was lost meanwhile: the
// error names that key and matches ErrNotHeld.
func TestUnlockAllReleasesTheRestAndNamesALostKey(t *testing.T) {
	c, admin := newClient(t, shared())
	base := key(t)
	keys := []string{base + ":1", base + ":2", base + ":3"}
	locks, err := c.LockAll(ctxT(t), keys, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Del(ctxT(t), keys[1]).Err(); err != nil { // the second lock is lost
		t.Fatal(err)
	}
	err = c.UnlockAll(ctxT(t), append(locks, nil))
	if !errors.Is(err, dlock.ErrNotHeld) || !strings.Contains(err.Error(), fmt.Sprintf("%q", keys[1])) {
		t.Fatalf("UnlockAll with %q lost: %v, want ErrNotHeld naming it", keys[1], err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if st, err := c.Inspect(ctxT(t), k); err != nil || st.Held {
			t.Fatalf("%q still held after UnlockAll: %+v %v", k, st, err)
		}
	}
}

// Bad input is refused before anything is sent.
func TestLockAllBadInput(t *testing.T) {
	c, admin := newClient(t, shared())
	k := key(t)
	for name, keys := range map[string][]string{
		"none":      nil,
		"duplicate": {k + ":x", k + ":y", k + ":x"},
		"empty":     {k + ":z", ""},
		"reserved":  {k + ":w", "dlock:fence:x"},
	} {
		if _, err := c.LockAll(ctxT(t), keys); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", name, err)
		}
	}
	if n := admin.Exists(ctxT(t), k+":x", k+":y", k+":z", k+":w").Val(); n != 0 {
		t.Fatalf("%d keys set by refused LockAll calls", n)
	}
}

// Redlock: LockAll holds every key on a majority.
func TestLockAllOverRedlock(t *testing.T) {
	c, _ := newRedlock(t, startNodes(t, 3))
	base := key(t)
	keys := []string{base + ":b", base + ":a"}
	locks, err := c.LockAll(ctxT(t), keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range locks {
		if st, err := c.Inspect(ctxT(t), keys[i]); err != nil || !st.Held || l.Fence() <= 0 {
			t.Fatalf("%q: %+v %v", keys[i], st, err)
		}
	}
	if err := c.UnlockAll(ctxT(t), locks); err != nil {
		t.Fatal(err)
	}
}
