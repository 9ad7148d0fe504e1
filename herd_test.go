package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// herd runs n goroutines that each take the lock on key once through c,
// hold it for hold, and unlock; it fails the test on an overlap, a fence
// that does not grow, or a Lock that fails.
func herd(t *testing.T, c *dlock.Client, key string, n int, hold time.Duration, opts ...dlock.Option) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var (
		inside    atomic.Int32
		mu        sync.Mutex
		lastFence int64
		served    atomic.Int32
		wg        sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, key, opts...)
			if err != nil {
				t.Errorf("Lock: %v", err)
				return
			}
			if inside.Add(1) != 1 {
				t.Error("two holders at once")
			}
			mu.Lock()
			if l.Fence() <= lastFence {
				t.Errorf("fence %d after %d", l.Fence(), lastFence)
			}
			lastFence = l.Fence()
			mu.Unlock()
			time.Sleep(hold)
			inside.Add(-1)
			if err := l.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
				t.Errorf("Unlock: %v", err)
			}
			served.Add(1)
		}()
	}
	wg.Wait()
	if got := served.Load(); int(got) != n {
		t.Fatalf("%d of %d served", got, n)
	}
}

// A thousand goroutines wait on one key through one Client on a go-redis
// client with its default options: all are served once, in turn; the
// user's pool stays free for the application (an unrelated GET keeps
// answering), and the server sees no more connections than the pool holds
// plus dlock's subscription.
func TestAThousandWaitersOnADefaultClientAreAllServed(t *testing.T) {
	if testing.Short() {
		t.Skip("a thousand waiters")
	}
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	c := dlock.New(rdb)
	defer rdb.Close()
	defer c.Close()
	admin := s.Client(t)
	k := key(t)

	stop := make(chan struct{})
	var watchers sync.WaitGroup
	var maxConns atomic.Int64
	watchers.Add(1)
	go func() { // the application's own traffic, and the server's view
		defer watchers.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if err := rdb.Get(context.Background(), "unrelated").Err(); err != nil && !errors.Is(err, redis.Nil) {
				t.Errorf("an unrelated GET on the same client: %v", err)
			}
			if n := int64(redistest.ConnectedClients(admin)); n > maxConns.Load() {
				maxConns.Store(n)
			}
		}
	}()
	herd(t, c, k, 1000, time.Millisecond, dlock.WithTTL(5*time.Second))
	close(stop)
	watchers.Wait()
	// The pool, dlock's one subscription, the admin client, and dlock's
	// own pipelining client (internal/transport/pipeline.go: five connections, one per batch
	// in flight, and a sixth while it replaces a broken one).
	if limit := int64(10*runtime.GOMAXPROCS(0) + 8); maxConns.Load() > limit {
		t.Errorf("the server saw %d connections, more than the pool, the subscription and the pipeline (%d)", maxConns.Load(), limit)
	}
}

// At the shortest TTL the API accepts, a hundred waiters that each take
// the lock twice all get it: a grant is never refused for the age of the
// step it counts from, and a waiter that cannot use one keeps its place.
func TestShortTTLWaitersAllAcquire(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var got atomic.Int32
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 2; j++ {
				l, err := c.Lock(ctx, k, dlock.WithTTL(dlock.MinTTL))
				if err != nil {
					t.Errorf("Lock at MinTTL: %v", err)
					return
				}
				got.Add(1)
				time.Sleep(2 * time.Millisecond)
				_ = l.Unlock(ctx) // may find it expired: 2 ms of a 10 ms lease on a loaded machine
			}
		}()
	}
	wg.Wait()
	if n := got.Load(); n != 200 {
		t.Fatalf("%d of 200 acquisitions", n)
	}
}

// failNext is a go-redis hook that fails the next script call once armed.
type failNext struct {
	processOnly
	armed atomic.Bool
}

func (f *failNext) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && f.armed.CompareAndSwap(true, false) {
			err := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("injected failure")}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// handedOver returns a lock on k that c obtained by a hand-off from another
// holder (so its key starts with the short claim, not the TTL).
func handedOver(t *testing.T, c *dlock.Client, k string, opts ...dlock.Option) *dlock.Lock {
	t.Helper()
	other, rdb := newClient(t, shared())
	holder := mustLock(t, other, k, dlock.WithTTL(time.Minute))
	got := lockLater(t, c, k, opts...)
	eventually(t, "queued", func() bool { return queueLen(t, rdb, k) == 1 })
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	return l
}

// A hand-off to another Client's waiter gives a short claim, which the
// waiter's join confirms for the whole TTL before its Lock returns. When
// that join fails, a Lock that rides out node errors joins again and
// holds the whole TTL; one with WithFailFast says so, and the claim is
// passed on: the key is free for others at once, not held up for the TTL.
func TestAHandOffWhoseConfirmationFailsIsPassedOn(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		hook := &failNext{}
		rdb := shared().Client(t)
		rdb.AddHook(hook)
		c := dlock.New(rdb)
		t.Cleanup(func() { c.Close() })
		other, _ := newClient(t, shared())
		k := key(t)
		holder := mustLock(t, other, k, dlock.WithTTL(time.Minute))
		opts := []dlock.Option{dlock.WithTTL(30 * time.Second)}
		if failFast {
			opts = append(opts, dlock.WithFailFast())
		}
		type result struct {
			l   *dlock.Lock
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := c.Lock(ctxT(t), k, opts...)
			got <- result{l, err}
		}()
		eventually(t, "queued", func() bool { return queueLen(t, shared().Client(t), k) == 1 })
		hook.armed.Store(true) // the waiter's next script: its confirming join
		if err := holder.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		r := <-got
		if !failFast {
			if r.err != nil {
				t.Fatalf("Lock riding out the failed join: %v", r.err)
			}
			if pttl := rdb.PTTL(ctxT(t), k).Val(); pttl < 20*time.Second {
				t.Fatalf("the key's PTTL %v when Lock returned, want the whole 30 s", pttl)
			}
			_ = r.l.Unlock(ctxT(t))
			continue
		}
		var ne *dlock.NodeError
		if !errors.As(r.err, &ne) {
			t.Fatalf("Lock with WithFailFast: %v, want the failed join's *NodeError", r.err)
		}
		eventually(t, "the claim is passed on", func() bool {
			l, err := other.TryLock(ctxT(t), k)
			if err == nil {
				_ = l.Unlock(ctxT(t))
			}
			return err == nil
		})
	}
}

// An Extend right after a hand-off is not undone by the extension of the
// claim.
func TestExtendJustAfterAHandOffIsKept(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	l := handedOver(t, c, k, dlock.WithTTL(30*time.Second))
	if err := l.Extend(ctxT(t), 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // past the claim and its extension
	if pttl := rdb.PTTL(ctxT(t), k).Val(); pttl < 4*time.Minute {
		t.Fatalf("PTTL %v after Extend(5m): the extension was undone", pttl)
	}
	_ = l.Unlock(ctxT(t))
}

// A waiter whose context ends while it waits (between two steps, or with
// its join in flight) leaves no ghost: once the holder releases, the lock
// is free for the next TryLock at once.
func TestAWaiterThatGivesUpLeavesNoGhost(t *testing.T) {
	c, rdb := newClient(t, shared())
	other, _ := newClient(t, shared())
	for i, after := range []time.Duration{-1, 0, 50 * time.Microsecond, 300 * time.Microsecond, time.Millisecond, 5 * time.Millisecond, 100 * time.Millisecond, 400 * time.Millisecond} {
		k := key(t) + strconv.Itoa(i)
		holder := mustLock(t, other, k, dlock.WithTTL(time.Minute))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { _, err := c.Lock(ctx, k); done <- err }()
		if after < 0 {
			eventually(t, "queued", func() bool { return queueLen(t, rdb, k) == 1 })
		} else {
			time.Sleep(after)
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want context.Canceled", err)
		}
		// A join still in flight is followed by its leave: wait for it.
		eventually(t, "the waiter left", func() bool { return queueLen(t, rdb, k) == 0 })
		if err := holder.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		l, err := other.TryLock(ctxT(t), k)
		if err != nil {
			t.Fatalf("cancel after %v: TryLock after the release: %v (the lock went to a departed waiter)", after, err)
		}
		_ = l.Unlock(ctxT(t))
	}
}

// Close, then the go-redis client's Close, as the usual defers run: waiting
// Lock calls end with ErrClosed, and nobody is left in line.
func TestCloseThenRedisCloseGivesWaitersErrClosed(t *testing.T) {
	holderC, admin := newClient(t, shared())
	rdb := shared().Client(t)
	c := dlock.New(rdb)
	k := key(t)
	holder := mustLock(t, holderC, k, dlock.WithTTL(time.Minute))
	const n = 5
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() { _, err := c.Lock(context.Background(), k); errs <- err }()
	}
	eventually(t, "all queued", func() bool { return queueLen(t, admin, k) == n })
	c.Close()
	rdb.Close()
	for i := 0; i < n; i++ {
		if err := <-errs; !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("a waiting Lock after Close: %v, want ErrClosed and ErrNotObtained", err)
		}
	}
	if got := queueLen(t, admin, k); got != 0 {
		t.Fatalf("%d waiters left in line after Close", got)
	}
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if v := admin.Get(ctxT(t), k).Val(); v != "" {
		t.Fatal("the released lock went to a closed Client's waiter")
	}
}

// WithNodeTimeout bounds each call of a single-node Lock too: on a paused
// server, before and while it waits, a Lock with WithFailFast ends with a
// *NodeError, not at the context's end. (Without it, Lock waits through
// the pause: outage_test.go.)
func TestLockWithNodeTimeoutOnAPausedServer(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	for _, when := range []string{"before", "while waiting"} {
		t.Run(when, func(t *testing.T) {
			s := redistest.Start(t)
			c, _ := newClient(t, s)
			other, _ := newClient(t, s)
			k := key(t)
			mustLock(t, other, k, dlock.WithTTL(time.Minute))
			if when == "before" {
				s.Pause()
			}
			t.Cleanup(s.Resume)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.Lock(ctx, k, dlock.WithNodeTimeout(100*time.Millisecond), dlock.WithFailFast())
				done <- err
			}()
			if when != "before" {
				eventually(t, "queued", func() bool { st, _ := other.Inspect(ctxT(t), k); return st.Waiters == 1 })
				s.Pause()
			}
			err := <-done
			var ne *dlock.NodeError
			if !errors.As(err, &ne) || errors.Is(err, dlock.ErrNotObtained) || ctx.Err() != nil {
				t.Fatalf("Lock on a paused server: %v, want a *NodeError before the context ends", err)
			}
		})
	}
}

// A grant published while the Client's subscription is down is found by
// the group's keepalive: the waiter gets that very grant (its fence), not a
// later one after the claim lapsed.
func TestAGrantWhoseMessageIsLostIsFoundByTheKeepalive(t *testing.T) {
	c, _ := newClient(t, shared())
	other, admin := newClient(t, shared())
	k := key(t)
	holder := mustLock(t, other, k, dlock.WithTTL(time.Minute))
	got := lockLater(t, c, k, dlock.WithTTL(time.Minute))
	eventually(t, "queued", func() bool { return queueLen(t, admin, k) == 1 })
	if err := admin.Do(ctxT(t), "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	fence, _ := admin.Get(ctxT(t), "dlock:fence:{"+k+"}").Int64()
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Fence() != fence {
		t.Fatalf("the waiter's fence %d, the hand-off's %d: the grant was lost", l.Fence(), fence)
	}
	_ = l.Unlock(ctxT(t))
}

// A thousand goroutines wait on one key through one Redlock Client of five
// nodes, with the defaults (the node timeout among them): all are served,
// one at a time, with fences that grow, and every Unlock succeeds. Each
// goroutine's first attempt, all sent at once, once queued the first
// holder's release behind five thousand scripts, and now and then an
// Unlock found no majority within the node timeout (listens.first).
func TestARedlockHerdWithTheDefaultsUnlocksCleanly(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	if testing.Short() {
		t.Skip("a herd")
	}
	c, _ := newRedlock(t, startNodes(t, 5))
	herd(t, c, key(t), 1000, time.Millisecond)
}

// queuedThenStalled starts a Lock on ctx, on a Client whose calls only
// their contexts bound, queued behind another Client's holder of a fresh
// key, and then pauses the server. done gets Lock's error; resume resumes
// the server. The Client is closed, and its go-redis client after it, when
// the test ends.
//
// No script of the Client's is in flight when the server pauses, and until
// resume its scripts fail unsent, as to a server that cannot be reached: a
// script in flight on a paused server is bounded only by the client's read
// timeout, here none (docs/waiting.md), so a keepalive sent just before the
// pause, or just before Close began, would hold the waiter until resume. On
// a loaded machine that happened (once in a full run).
func queuedThenStalled(t *testing.T, ctx context.Context) (resume func(), c *dlock.Client, admin *redis.Client, holder *dlock.Lock, k string, done chan error) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout, opts.WriteTimeout = -1, -1 // only the context bounds a call
	rdb := redis.NewClient(opts)
	gate := &scriptGate{}
	rdb.AddHook(gate)
	t.Cleanup(func() { rdb.Close() })
	c = dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	other, admin := newClient(t, s)
	k = key(t)
	holder = mustLock(t, other, k, dlock.WithTTL(time.Minute))
	done = make(chan error, 1)
	go func() { _, err := c.Lock(ctx, k); done <- err }()
	eventually(t, "queued", func() bool { return queueLen(t, admin, k) == 1 })
	gate.shut(t)
	s.Pause()
	var once sync.Once
	return func() { once.Do(func() { s.Resume(); gate.open() }) }, c, admin, holder, k, done
}

// scriptGate is a go-redis hook that, while shut, fails the scripts sent
// with a dial error (never sent), and counts the scripts in flight.
type scriptGate struct {
	processOnly
	mu       sync.Mutex
	closed   bool
	inflight int // scripts let through and not yet answered
}

func (g *scriptGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		g.mu.Lock()
		closed := g.closed
		if !closed {
			g.inflight++
		}
		g.mu.Unlock()
		if closed {
			err := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("the test's gate is shut")}
			cmd.SetErr(err)
			return err
		}
		defer func() { g.mu.Lock(); g.inflight--; g.mu.Unlock() }()
		return next(ctx, cmd)
	}
}

// shut fails the scripts sent from now on, and waits until none let
// through before is in flight.
func (g *scriptGate) shut(t *testing.T) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	eventually(t, "no script in flight", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return g.inflight == 0 })
}

// open lets the scripts through again.
func (g *scriptGate) open() {
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
}

// A queued waiter whose context ends while the server has stalled returns
// with the context, not after its leave's answer: the leave finishes in the
// background once the server answers again, and leaves no ghost.
func TestAWaiterOnAStalledServerReturnsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	resume, _, admin, holder, k, done := queuedThenStalled(t, ctx)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Lock: %v, want context.Canceled", err)
		}
	case <-time.After(3 * time.Second): // the cleanup timeout is 5 s
		resume()
		t.Fatal("Lock waited for the stalled server after its context ended")
	}
	resume()
	eventually(t, "the waiter's leave landed", func() bool { return queueLen(t, admin, k) == 0 })
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if v := admin.Get(ctxT(t), k).Val(); v != "" {
		t.Fatal("the released lock went to the departed waiter")
	}
}

// Likewise when Close ends the wait: the waiter returns ErrClosed at once,
// and its leave, not yet answered by the stalled server, is work that Close
// waits for, so Close returns only once the queue is clear of it.
func TestAWaiterOnAStalledServerReturnsWhenCloseBegins(t *testing.T) {
	resume, c, admin, holder, k, done := queuedThenStalled(t, context.Background())
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("Lock: %v, want ErrClosed", err)
		}
	case <-time.After(3 * time.Second): // the cleanup timeout is 5 s
		resume()
		t.Fatal("Lock waited for the stalled server after Close began")
	}
	select {
	case <-closed:
		resume()
		t.Fatal("Close returned before the waiter's leave had an answer")
	case <-time.After(100 * time.Millisecond):
	}
	resume()
	<-closed
	if n := queueLen(t, admin, k); n != 0 {
		t.Fatalf("%d waiters queued after Close returned", n)
	}
	if err := holder.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// A Lock whose script is in flight on a stalled server returns when its
// context ends, even on a client that never times out a read (go-redis
// ends no read when a context ends): the first acquire of a free key, and
// a queued waiter's keepalive. Once the server is back, what the scripts
// did is undone: the key is free, the line empty. (Before, such a Lock
// returned only when the server answered, and on a default client about 5 s
// after a 300-ms context ended.)
func TestALockWithAScriptInFlightOnAStalledServerReturnsWithItsContext(t *testing.T) {
	s := redistest.Start(t)
	opts := s.Options()
	opts.ReadTimeout, opts.WriteTimeout = -1, -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	other, admin := newClient(t, s)
	mustLock(t, c, key(t)+":warm").Unlock(ctxT(t))
	for _, contended := range []bool{false, true} {
		k := fmt.Sprintf("%s:%v", key(t), contended)
		var holder *dlock.Lock
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		if contended {
			holder = mustLock(t, other, k, dlock.WithTTL(time.Minute))
			go func() { _, err := c.Lock(ctx, k); done <- err }()
			eventually(t, "queued", func() bool { return queueLen(t, admin, k) == 1 })
		}
		s.Pause()
		if contended {
			time.Sleep(500 * time.Millisecond) // a keepalive is sent, and stalls
		} else {
			go func() { _, err := c.Lock(ctx, k); done <- err }()
			time.Sleep(100 * time.Millisecond) // the acquire is sent, and stalls
		}
		cancel()
		returnsCancelled(t, s, done, fmt.Sprintf("Lock, contended %v", contended))
		if holder != nil {
			eventually(t, "the waiter's leave landed", func() bool { return queueLen(t, admin, k) == 0 })
			if err := holder.Unlock(ctxT(t)); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the key free", func() bool { return admin.Exists(ctxT(t), k).Val() == 0 })
	}
}

// The same with WithReplicaAck, whose acquire and WAIT hold a connection
// of their own: Lock and TryLock return when their context ends, and the
// grant that lands once the server is back is given back.
func TestAReplicaAckedAcquireOnAStalledServerReturnsWithItsContext(t *testing.T) {
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	opts := master.Options()
	opts.ReadTimeout, opts.WriteTimeout = -1, -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	_, admin := newClient(t, master)
	ack := dlock.WithReplicaAck(1, 200*time.Millisecond)
	eventually(t, "the replica acknowledges", func() bool { // once it has synced
		l, err := c.TryLock(ctxT(t), key(t)+":warm", ack)
		if err == nil {
			l.Unlock(ctxT(t))
		}
		return err == nil
	})
	for _, try := range []bool{false, true} {
		k := fmt.Sprintf("%s:%v", key(t), try)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		master.Pause()
		go func() {
			var err error
			if try {
				_, err = c.TryLock(ctx, k, ack)
			} else {
				_, err = c.Lock(ctx, k, ack)
			}
			done <- err
		}()
		time.Sleep(100 * time.Millisecond) // the acquire is sent, and stalls
		cancel()
		returnsCancelled(t, master, done, fmt.Sprintf("TryLock (else Lock) %v", try))
		eventually(t, "the key free", func() bool { return admin.Exists(ctxT(t), k).Val() == 0 })
	}
}

// returnsCancelled waits for the call named what to return on done, its context
// cancelled while s (paused) stalls it: at once, with an error matching
// ErrNotObtained and context.Canceled. Then it resumes s.
func returnsCancelled(t *testing.T, s *redistest.Server, done <-chan error, what string) {
	t.Helper()
	defer s.Resume()
	select {
	case err := <-done:
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v, want ErrNotObtained and context.Canceled", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s waited for the stalled server after its context ended", what)
	}
}
