package dlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// releaseGate is a go-redis hook on the release, join and leave scripts:
// it counts the joins and leaves, and can hold the next release until opened, or lose
// its reply (the script runs, the caller gets an error).
type releaseGate struct {
	joins    atomic.Int32
	leaves   atomic.Int32
	hold     atomic.Bool   // hold the next release until open is closed
	held     chan struct{} // a release is being held
	open     chan struct{}
	loseNext atomic.Bool // the next release runs, and its reply is lost
}

func newReleaseGate() *releaseGate {
	return &releaseGate{held: make(chan struct{}, 1), open: make(chan struct{})}
}

func (g *releaseGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *releaseGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (g *releaseGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 2 || cmd.Name() != "evalsha" {
			return next(ctx, cmd)
		}
		switch fmt.Sprint(args[1]) {
		case joinScript.Hash():
			g.joins.Add(1)
		case leaveScript.Hash():
			g.leaves.Add(1)
		case releaseScript.Hash():
			if g.hold.CompareAndSwap(true, false) {
				g.held <- struct{}{}
				<-g.open
			}
			err := next(ctx, cmd)
			if err == nil && g.loseNext.CompareAndSwap(true, false) {
				err = &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected: reply lost")}
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// throughItsLine returns c's lock on k, obtained through c's line (a
// grant of the queue, after other's holder released it), so that c's next
// waiters on k defer their joins to its release, and deferred, which
// reports how many do.
func throughItsLine(t *testing.T, c, other *Client, k string) (held *Lock, deferred func() int) {
	t.Helper()
	ctx := context.Background()
	c.groups.deferFor = time.Hour // only the release ends a deferral
	first, err := other.TryLock(ctx, k, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, k, WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for c.groups.waiting(k) == false || !queuedOn(t, c, k) {
		time.Sleep(time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if held = <-got; held == nil {
		t.Fatal("c's waiter got no lock")
	}
	deferred = func() int {
		c.groups.mu.Lock()
		g := c.groups.m[k]
		c.groups.mu.Unlock()
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.deferred)
	}
	return held, deferred
}

// queuedOn reports whether k's queue has a waiter.
func queuedOn(t *testing.T, c *Client, k string) bool {
	rdb := c.nodes[0].rdb.(*redis.Client)
	return rdb.ZCard(context.Background(), namesOf(k).all[2]).Val() > 0
}

// eventually fails t unless cond holds within a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("never: " + what)
		}
	}
}

// The release of a lock held through its Client's line makes the first
// join of that Client's deferred waiter in its own script: the waiter
// runs no join script, and, first in line, gets the lock from that very
// release.
func TestAReleaseJoinsItsClientsDeferredWaiter(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	gate := newReleaseGate()
	rdb.AddHook(gate)
	c, other := New(rdb), New(rdb)
	defer other.Close()
	defer c.Close()
	const k = "lock:fold"
	held, deferred := throughItsLine(t, c, other, k)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(context.Background(), k, WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	joins := gate.joins.Load()
	if err := held.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.Fatal("the deferred waiter got no lock")
	}
	if n := gate.joins.Load() - joins; n != 0 {
		t.Fatalf("the deferred waiter ran %d join scripts, want 0 (its release joins it)", n)
	}
	if l.Fence() <= held.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), held.Fence())
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(context.Background(), k, namesOf(k).all[2]).Val(); n != 0 {
		t.Fatalf("%d of the key and its queue left after the last unlock", n)
	}
}

// A deferred waiter whose context ends while the release that joins it is
// under way returns at once, and, once that release has answered, leaves
// the line: the grant the release gave it is passed on, and the key is
// free long before its TTL.
func TestAWaiterThatGivesUpWhileItsReleaseJoinsItLeaves(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	gate := newReleaseGate()
	rdb.AddHook(gate)
	c, other := New(rdb), New(rdb)
	defer other.Close()
	defer c.Close()
	const k = "lock:fold-gone"
	held, deferred := throughItsLine(t, c, other, k)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, k, WithTTL(time.Minute))
		if l != nil {
			err = errors.New("got the lock")
		}
		done <- err
	}()
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	gate.hold.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- held.Unlock(context.Background()) }()
	<-gate.held // the release, with the waiter's join, is about to be sent
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock: %v, want context.Canceled while its release is held", err)
	}
	close(gate.open)
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	nm := namesOf(k)
	// Its leave, not the claim's expiry, frees the key.
	eventually(t, "the waiter leaves", func() bool { return gate.leaves.Load() > 0 })
	eventually(t, "the key and its line are empty", func() bool {
		return rdb.Exists(context.Background(), k, nm.all[2]).Val() == 0
	})
	if l, err := other.TryLock(context.Background(), k); err != nil {
		t.Fatalf("TryLock after the waiter left: %v", err)
	} else {
		_ = l.Unlock(context.Background())
	}
}

// A deferred waiter whose release ran its join but whose answer was lost
// joins again itself: that join finds the grant the release gave it, and
// confirms it, long before the key's TTL.
func TestAWaiterWhoseReleaseWentUnansweredJoinsItself(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	gate := newReleaseGate()
	rdb.AddHook(gate)
	c, other := New(rdb), New(rdb)
	defer other.Close()
	defer c.Close()
	const k = "lock:fold-lost"
	held, deferred := throughItsLine(t, c, other, k)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(context.Background(), k, WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	joins := gate.joins.Load()
	gate.loseNext.Store(true)
	if err := held.Unlock(context.Background()); err == nil {
		t.Fatal("Unlock whose reply was lost: no error")
	}
	l := <-got
	if l == nil {
		t.Fatal("the waiter got no lock")
	}
	if n := gate.joins.Load() - joins; n != 1 {
		t.Fatalf("the waiter ran %d join scripts, want 1", n)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A release that finds its key lost (expired, or deleted behind its
// holder's back) releases nothing and joins nobody: the deferred waiter
// joins itself, and its join, finding the key free, takes it.
func TestAReleaseThatReleasesNothingLeavesTheJoinToTheWaiter(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	gate := newReleaseGate()
	rdb.AddHook(gate)
	c, other := New(rdb), New(rdb)
	defer other.Close()
	defer c.Close()
	const k = "lock:fold-lost-key"
	held, deferred := throughItsLine(t, c, other, k)
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(context.Background(), k, WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "a waiter defers", func() bool { return deferred() == 1 })
	joins := gate.joins.Load()
	rdb.Del(context.Background(), k)
	if err := held.Unlock(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a lost key: %v, want ErrNotHeld", err)
	}
	l := <-got
	if l == nil {
		t.Fatal("the waiter got no lock")
	}
	if n := gate.joins.Load() - joins; n != 1 {
		t.Fatalf("the waiter ran %d join scripts, want 1", n)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}
