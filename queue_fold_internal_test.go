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
	"github.com/dlock-go/dlock/internal/transport"
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

// lockingAsync starts c.Lock(ctx, k) with a minute's TTL and opts, and
// returns where its lock (nil if none) arrives; an error fails t unless
// ctx ended or the caller expects one (unanswered).
func lockingAsync(t *testing.T, ctx context.Context, c *Client, k string, opts ...Option) <-chan *Lock {
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.Lock(ctx, k, append([]Option{WithTTL(time.Minute)}, opts...)...)
		if err != nil && ctx.Err() == nil && !errors.Is(err, transport.ErrNodeTimeout) {
			t.Error(err)
		}
		got <- l
	}()
	return got
}

// foldCase is a Client c holding a key through its line (a grant of the
// queue, after another Client's holder released it), and one more waiter
// of c that defers its join to that lock's release: the release makes the
// join (joinFold). The gate is on the server's client.
type foldCase struct {
	rdb      *redis.Client
	gate     *releaseGate
	c, other *Client
	held     *Lock        // c's lock, held through its line
	got      <-chan *Lock // the deferred waiter's
	joins    int32        // join scripts run before the release
}

// newFoldCase sets up a foldCase on k, the deferred waiter's Lock running
// with ctx and opts.
func newFoldCase(t *testing.T, ctx context.Context, k string, opts ...Option) *foldCase {
	t.Helper()
	f := &foldCase{rdb: redistest.Start(t).Client(t), gate: newReleaseGate()}
	f.rdb.AddHook(f.gate)
	f.c, f.other = New(f.rdb), New(f.rdb)
	t.Cleanup(func() { f.other.Close() })
	t.Cleanup(func() { f.c.Close() })
	f.c.groups.deferFor = time.Hour // only the release ends a deferral
	first, err := f.other.TryLock(context.Background(), k, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := lockingAsync(t, context.Background(), f.c, k)
	queue := namesOf(k).all[2]
	eventually(t, "c's waiter is in line", func() bool { return f.rdb.ZCard(context.Background(), queue).Val() > 0 })
	if err := first.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.held = <-got; f.held == nil {
		t.Fatal("c's waiter got no lock")
	}
	f.got = lockingAsync(t, ctx, f.c, k, opts...)
	eventually(t, "a waiter defers", func() bool { return deferredOn(f.c, k) == 1 })
	f.joins = f.gate.joins.Load()
	return f
}

// deferredOn reports how many of c's waiters on k defer their joins.
func deferredOn(c *Client, k string) int {
	c.groups.mu.Lock()
	g := c.groups.m[k]
	c.groups.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.deferred)
}

// joinsSince reports how many join scripts ran since the setup.
func (f *foldCase) joinsSince() int32 { return f.gate.joins.Load() - f.joins }

// unlockHeld starts the held lock's Unlock, holding its release, and
// returns once the release (with the waiter's join) is about to be sent:
// where Unlock's error arrives.
func (f *foldCase) unlockHeld() <-chan error {
	f.gate.hold.Store(true)
	unlocked := make(chan error, 1)
	go func() { unlocked <- f.held.Unlock(context.Background()) }()
	<-f.gate.held
	return unlocked
}

// answerAndLeave lets the held release through, and checks that the
// waiter, gone meanwhile, leaves: its leave, not the claim's expiry,
// frees key and its line.
func (f *foldCase) answerAndLeave(t *testing.T, key string, unlocked <-chan error) {
	t.Helper()
	close(f.gate.open)
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter leaves", func() bool { return f.gate.leaves.Load() > 0 })
	eventually(t, "the key and its line are empty", func() bool {
		return f.rdb.Exists(context.Background(), key, namesOf(key).all[2]).Val() == 0
	})
}

// joinedItself checks that the deferred waiter got the lock with one
// join script of its own, and unlocks it.
func (f *foldCase) joinedItself(t *testing.T) {
	t.Helper()
	l := <-f.got
	if l == nil {
		t.Fatal("the waiter got no lock")
	}
	if n := f.joinsSince(); n != 1 {
		t.Fatalf("the waiter ran %d join scripts, want 1", n)
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
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
	const k = "lock:fold"
	f := newFoldCase(t, context.Background(), k)
	if err := f.held.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	l := <-f.got
	if l == nil {
		t.Fatal("the deferred waiter got no lock")
	}
	if n := f.joinsSince(); n != 0 {
		t.Fatalf("the deferred waiter ran %d join scripts, want 0 (its release joins it)", n)
	}
	if l.Fence() <= f.held.Fence() {
		t.Fatalf("fence %d after %d", l.Fence(), f.held.Fence())
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.rdb.Exists(context.Background(), k, namesOf(k).all[2]).Val(); n != 0 {
		t.Fatalf("%d of the key and its queue left after the last unlock", n)
	}
}

// Two deferred waiters are joined by the one release, in one script, and
// served in turn, neither running a join script.
func TestAReleaseJoinsTwoDeferredWaiters(t *testing.T) {
	const k = "lock:fold-two"
	f := newFoldCase(t, context.Background(), k)
	second := lockingAsync(t, context.Background(), f.c, k)
	eventually(t, "a second waiter defers", func() bool { return deferredOn(f.c, k) == 2 })
	if err := f.held.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	fence := f.held.Fence()
	for range 2 {
		var l *Lock
		select {
		case l = <-f.got:
		case l = <-second:
		}
		if l == nil || l.Fence() <= fence {
			t.Fatalf("a deferred waiter got %v after fence %d", l, fence)
		}
		fence = l.Fence()
		if err := l.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.joinsSince(); n != 0 {
		t.Fatalf("the deferred waiters ran %d join scripts, want 0", n)
	}
}

// A deferred waiter whose context ends while the release that joins it is
// under way returns at once, and, once that release has answered, leaves
// the line: the grant the release gave it is passed on, and the key is
// free long before its TTL.
func TestAWaiterThatGivesUpWhileItsReleaseJoinsItLeaves(t *testing.T) {
	const k = "lock:fold-gone"
	ctx, cancel := context.WithCancel(context.Background())
	f := newFoldCase(t, ctx, k)
	unlocked := f.unlockHeld()
	cancel()
	if l := <-f.got; l != nil {
		t.Fatal("a waiter whose context ended got the lock")
	}
	f.answerAndLeave(t, k, unlocked)
	if l, err := f.other.TryLock(context.Background(), k); err != nil {
		t.Fatalf("TryLock after the waiter left: %v", err)
	} else {
		_ = l.Unlock(context.Background())
	}
}

// A deferred waiter whose release ran its join but whose answer was lost
// joins again itself: that join finds the grant the release gave it, and
// confirms it, long before the key's TTL.
func TestAWaiterWhoseReleaseWentUnansweredJoinsItself(t *testing.T) {
	f := newFoldCase(t, context.Background(), "lock:fold-lost")
	f.gate.loseNext.Store(true)
	if err := f.held.Unlock(context.Background()); err == nil {
		t.Fatal("Unlock whose reply was lost: no error")
	}
	f.joinedItself(t)
}

// A release that finds its key lost (expired, or deleted behind its
// holder's back) releases nothing and joins nobody: the deferred waiter
// joins itself, and its join, finding the key free, takes it.
func TestAReleaseThatReleasesNothingLeavesTheJoinToTheWaiter(t *testing.T) {
	const k = "lock:fold-lost-key"
	f := newFoldCase(t, context.Background(), k)
	f.rdb.Del(context.Background(), k)
	if err := f.held.Unlock(context.Background()); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a lost key: %v, want ErrNotHeld", err)
	}
	f.joinedItself(t)
}

// folded returns the word of the release that took the waiter, with the
// context's error if it has ended; a waiter whose context ends while the
// release is under way is marked gone (its releaser has it leave), one
// whose release failed is left to join itself, or to leave: it may be in
// line.
func TestFoldedReturnsTheReleasesWord(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		state foldState
		ctx   context.Context
		want  foldState
	}{
		{foldJoined, context.Background(), foldJoined},
		{foldFailed, context.Background(), foldFailed},
		{foldJoined, ended, foldJoined},
		{foldFailed, ended, foldFailed},
		{foldTaken, ended, foldGone},
	} {
		w := &queuedWaiter{signal: make(chan struct{}, 1), fold: c.state}
		got, err := w.folded(c.ctx, nil)
		if got != c.want || (err != nil) != (c.ctx.Err() != nil) || w.fold != c.want {
			t.Errorf("folded in state %d, context ended %v: %d, %v (now %d), want %d", c.state, c.ctx.Err() != nil, got, err, w.fold, c.want)
		}
	}
}

// A deferred waiter with a node timeout waits for the release that joins
// it no longer than it would for its own join: past the timeout it gives
// up, and leaves the line once that release has answered.
func TestAFoldedWaiterKeepsItsNodeTimeout(t *testing.T) {
	const k = "lock:fold-node-timeout"
	f := newFoldCase(t, context.Background(), k, WithNodeTimeout(50*time.Millisecond))
	unlocked := f.unlockHeld()
	select {
	case l := <-f.got:
		if l != nil {
			t.Fatal("a waiter whose release did not answer got the lock")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter waited for its release past its node timeout")
	}
	f.answerAndLeave(t, k, unlocked)
}
