package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// hammer runs goroutines that each lock keys[(g+i)%len(keys)] for cycles
// rounds with a context from ctxFor, checking that no two hold a key at
// once, and returns how many locks were obtained.
func hammer(t *testing.T, c *dlock.Client, keys []string, goroutines, cycles int, ctxFor func() (context.Context, context.CancelFunc), opts ...dlock.Option) int64 {
	t.Helper()
	holders := make([]atomic.Int32, len(keys))
	var obtained atomic.Int64
	var wg sync.WaitGroup
	var double atomic.Bool
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range cycles {
				k := (g + i) % len(keys)
				ctx, cancel := ctxFor()
				l, err := c.Lock(ctx, keys[k], opts...)
				cancel()
				if err != nil {
					continue
				}
				obtained.Add(1)
				if holders[k].Add(1) != 1 {
					double.Store(true)
				}
				holders[k].Add(-1)
				l.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	if double.Load() {
		t.Fatal("two holders of one key at once")
	}
	return obtained.Load()
}

// within is a context maker for hammer: each context ends after d.
func within(d time.Duration) func() (context.Context, context.CancelFunc) {
	return func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), d) }
}

// pausedUnderPipelining runs goroutines over keys for cycles rounds, so
// that c's pipeliner is up, then pauses s until the test ends.
func pausedUnderPipelining(t *testing.T, s *redistest.Server, c *dlock.Client, keys []string, goroutines, cycles int) {
	t.Helper()
	hammer(t, c, keys, goroutines, cycles, within(time.Minute))
	s.Pause()
	t.Cleanup(s.Resume)
}

func keysOf(t *testing.T, n int) []string {
	base := key(t)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", base, i)
	}
	return keys
}

// allFree waits until no key holds a lock: a grant whose caller left
// (its context ended while the script was in a pipeline) is given back.
func allFree(t *testing.T, c *dlock.Client, keys []string) {
	t.Helper()
	eventually(t, "every key free", func() bool {
		for _, k := range keys {
			if st, err := c.Inspect(ctxT(t), k); err != nil || st.Held {
				return false
			}
		}
		return true
	})
}

// Contexts that end at any moment while scripts are pipelined leave no
// lock behind and never two holders; the keys' TTL is a minute, so a lost
// grant would show.
func TestContextsEndingMidPipelineLeaveNoLockBehind(t *testing.T) {
	c, _ := newClient(t, shared())
	keys := keysOf(t, 8)
	ctxFor := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
	}
	hammer(t, c, keys, 128, 20, ctxFor, dlock.WithTTL(time.Minute))
	allFree(t, c, keys)
	if got := hammer(t, c, keys, 64, 5, func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}); got != 64*5 {
		t.Fatalf("after the cancellations, %d of %d locks obtained", got, 64*5)
	}
}

// A server that stalls while many goroutines' scripts are pipelined: every
// call returns (a node error or its context's end), none hangs, and once
// the server is back the locks work and nothing is left held.
func TestAStalledServerEndsEveryPipelinedCall(t *testing.T) {
	stalledUnderPipelining(t, dlock.WithNodeTimeout(100*time.Millisecond))
}

// Without a node timeout, a context's end is what ends a pipelined call to
// a stalled server: a pipelined script's wait ends with its context, so
// the calls return with their contexts, and the grants the server runs once it
// resumes are given back.
func TestContextsEndPipelinedCallsToAStalledServer(t *testing.T) {
	stalledUnderPipelining(t)
}

// stalledUnderPipelining pauses a server under pipelining, runs Locks
// with opts and 300-ms contexts that must all return without the lock,
// resumes it, and checks that nothing is left held and locks work again.
func stalledUnderPipelining(t *testing.T, opts ...dlock.Option) {
	t.Helper()
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	keys := keysOf(t, 64)
	pausedUnderPipelining(t, s, c, keys, 64, 5)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if got := hammer(t, c, keys, 64, 2, within(300*time.Millisecond), append(opts, dlock.WithTTL(time.Minute))...); got != 0 {
			t.Errorf("%d locks obtained from a paused server", got)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("pipelined calls to a paused server did not return within 30s")
	}
	s.Resume()
	allFree(t, c, keys)
	if got := hammer(t, c, keys, 64, 5, within(time.Minute)); got != 64*5 {
		t.Fatalf("after the stall, %d of %d locks obtained", got, 64*5)
	}
}

// Close waits for the grants that came back after their callers left,
// and gives them back: a program that exits after Close leaves nothing
// held.
func TestCloseGivesBackLateGrantsBeforeReturning(t *testing.T) {
	rdb := shared().Client(t)
	c := dlock.New(rdb)
	keys := keysOf(t, 20)
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Microsecond)
			defer cancel()
			if l, err := c.Lock(ctx, k, dlock.WithTTL(time.Minute)); err == nil {
				l.Unlock(context.Background())
			}
		}()
	}
	wg.Wait()
	c.Close()
	for _, k := range keys {
		if n := rdb.Exists(context.Background(), k).Val(); n != 0 {
			t.Fatalf("%q held after Close returned", k)
		}
	}
}

// Close returns while the server is stalled with pipelined scripts in
// flight: their waits are bounded like a plain client's.
func TestCloseReturnsWhileTheServerStallsUnderPipelining(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	rdb := s.Client(t)
	c := dlock.New(rdb)
	keys := keysOf(t, 16)
	pausedUnderPipelining(t, s, c, keys, 64, 3)
	hammer(t, c, keys, 64, 1, within(200*time.Millisecond), dlock.WithTTL(time.Minute))
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		// 30 s is go-redis's own bound on closing a pipeliner with a
		// batch in flight: Close must not wait for it (internal/transport/conns.go).
		t.Fatal("Close did not return within 30s while the server was paused")
	}
}

// Direct: every call goes through the user's client, hooks and all (here
// a dial hook that is the only way to the server).
func TestDirectSendsEverythingThroughTheUsersClient(t *testing.T) {
	opts := shared().Options()
	real := opts.Addr
	opts.Addr = "127.0.0.1:1"
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(redirect(real))
	c := dlock.New(dlock.Direct(rdb))
	t.Cleanup(func() { c.Close() })
	keys := keysOf(t, 8)
	long := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	if got := hammer(t, c, keys, 32, 5, long); got != 32*5 {
		t.Fatalf("%d of %d locks through Direct", got, 32*5)
	}
}

// redirect is a hook that dials addr whatever the client was told.
type redirect string

func (r redirect) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, _ string) (net.Conn, error) { return next(ctx, network, string(r)) }
}
func (redirect) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (redirect) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Grants that run only once a stalled server comes back, after their
// callers have gone and their requests' waits have ended unanswered, are
// given back: the blind give-back that such a request leaves may reach the
// server first, and finds nothing, so it is sent again once the server
// answers. (Before, 4 of the 128 keys here stayed held for their TTL.)
func TestGrantsAStalledServerRunsLateAreGivenBack(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout, opts.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	keys := keysOf(t, 128)
	pausedUnderPipelining(t, s, c, keys, 128, 2)
	paused := time.Now()
	if got := hammer(t, c, keys, 128, 1, within(200*time.Millisecond), dlock.WithTTL(time.Minute)); got != 0 {
		t.Errorf("%d locks obtained from a paused server", got)
	}
	// Past the pipeline's bound (1.4 s here) and go-redis's retries: every
	// request's wait has ended unanswered before the server runs it.
	time.Sleep(time.Until(paused.Add(4500 * time.Millisecond)))
	s.Resume()
	allFree(t, c, keys)
}

// Scripts missing on the server (a fresh server, a restart, a failover,
// SCRIPT FLUSH) are loaded once for all the pipelined calls that find them
// missing at the same time, not once each: a herd's batch answers NOSCRIPT
// together, and a SCRIPT LOAD each would take the whole pool at once.
func TestAHerdLoadsAMissingScriptOnce(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s:%d", key(t), i)
	}
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	hammer(t, c, keys, 64, 2, background) // the pipeliner is up
	if err := rdb.ScriptFlush(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	before := scriptLoads(t, rdb)
	hammer(t, c, keys, 256, 2, background)
	// Two scripts (acquire, release), each loaded again by whichever
	// calls find it missing before one load is through: a few at most.
	if loads := scriptLoads(t, rdb) - before; loads > 8 {
		t.Fatalf("%d SCRIPT LOADs after the flush, want a few (once per script)", loads)
	}
}

// scriptLoads is how many SCRIPT LOADs the server has run.
func scriptLoads(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	return redistest.CommandCalls(rdb, "script|load")
}

// A server whose scripts are flushed again and again (SCRIPT FLUSH every
// few milliseconds) still runs every pipelined call: one flushed again
// between the load and the call's second try sends the script itself.
// No call fails with NOSCRIPT, and no key is left held.
func TestPipelinedCallsSurviveRepeatedScriptFlushes(t *testing.T) {
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				rdb.ScriptFlush(context.Background())
			}
		}
	}()
	base := key(t)
	var wg sync.WaitGroup
	var noscript atomic.Int64
	failed := func(err error) {
		if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
			noscript.Add(1)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("%s:%d", base, g)
			for time.Now().Before(deadline) {
				l, err := c.TryLock(context.Background(), k)
				failed(err)
				if err == nil {
					failed(l.Unlock(context.Background()))
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flushed
	c.Close()
	if n := noscript.Load(); n > 0 {
		t.Errorf("%d calls failed with NOSCRIPT", n)
	}
	for g := range 64 {
		if k := fmt.Sprintf("%s:%d", base, g); rdb.Exists(ctxT(t), k).Val() != 0 {
			t.Errorf("%s is still held after every lock was unlocked", k)
		}
	}
}

// Close returns within its documented bound (cleanups 10 s, then a command
// in flight go-redis's 3 s read timeout) when a Redlock wait left
// give-backs on two of three nodes that are paused: they run beside each
// other, the subscriptions end beside them, and Close ends them at its
// grace instead of letting one wait chain after another (it took 17 s).
func TestCloseIsBoundedWithTwoOfThreeNodesPaused(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s1, s2, s3 := redistest.Start(t), redistest.Start(t), redistest.Start(t)
	c := dlock.New(s1.Client(t), s2.Client(t), s3.Client(t))
	k := key(t)
	// The servers are new: this first lock dials them and loads the
	// scripts, more round trips than the default node timeout (50 ms)
	// allows a loaded machine (seen once, the whole package running
	// beside a CPU hog: no quorum, no answer from any node in time).
	// What is bounded is the Close below.
	if err := mustLock(t, c, k, dlock.WithNodeTimeout(5*time.Second)).Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	s2.Pause()
	s3.Pause()
	t.Cleanup(func() { s2.Resume(); s3.Resume() })
	ctx, cancel := context.WithTimeout(ctxT(t), time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("Lock with two of three nodes paused: %v", err)
	}
	closeWithinItsBound(t, c)
}

// A Client whose go-redis client the user closed first (Lock calls went
// on meanwhile, and failed) closes without waiting out its cleanups' grace:
// the waits' leaves cannot reach the server, and stop. (Close took the
// whole 10-s grace; found by review.)
func TestCloseIsPromptOnceTheUsersClientIsClosed(t *testing.T) {
	s := redistest.Start(t)
	ignore := goleak.IgnoreCurrent()
	rdb := redis.NewClient(s.Options())
	c := dlock.New(rdb)
	keys := keysOf(t, 16)
	hammer(t, c, keys, 64, 3, within(time.Minute))
	var held []*dlock.Lock
	for _, k := range keys[:4] {
		held = append(held, mustLock(t, c, k, dlock.WithAutoRenew()))
	}
	rdb.Close()
	hammer(t, c, keys, 32, 2, within(time.Second))
	for _, l := range held {
		l.Unlock(context.Background())
	}
	began := time.Now()
	c.Close()
	if d := time.Since(began); d > 5*time.Second { // the grace is 10 s
		t.Errorf("Close took %v", d)
	}
	var err error
	for range 20 { // a background give-up may still be returning
		if err = goleak.Find(ignore); err == nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("goroutines left: %v", err)
	}
}

// Close on a stalled server with pipelines in flight and scripts waiting
// for a free one is bounded as its doc says: the batch not yet sent is not,
// and go-redis retries none in flight. (It took 30 s, each batch retried
// through go-redis's budget and the open one sent after; found by review.)
func TestCloseIsBoundedWithBatchesStalledAndOneOpen(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	opts := s.Options()
	opts.MaxRetries = 0 // go-redis's default: 3
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	keys := keysOf(t, 64)
	pausedUnderPipelining(t, s, c, keys, 64, 3)
	var wg sync.WaitGroup
	for wave := range 2 {
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				if l, err := c.TryLock(ctx, keys[g]+string(rune('a'+wave))); err == nil {
					l.Unlock(ctx)
				}
			}()
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	closeWithinItsBound(t, c)
}

// closeWithinItsBound closes c and fails unless Close returned within its
// documented bound (the cleanups' 10 s and a command's 3-s read timeout),
// with a margin.
func closeWithinItsBound(t *testing.T, c *dlock.Client) {
	t.Helper()
	start := time.Now()
	c.Close()
	d := time.Since(start)
	t.Logf("Close took %v", d)
	if d > 16*time.Second {
		t.Fatalf("Close took %v, past its documented 13 s (and a margin)", d)
	}
}
