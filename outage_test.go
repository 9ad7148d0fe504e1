package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/torture"
)

// outageWaiters start a Lock and a Semaphore.Acquire waiting behind
// holders on c's node, each with 30 s on its context, and return what
// each wait ends with.
func outageWaiters(t *testing.T, holderC, waiterC *dlock.Client, k string) (lockDone, semDone chan error, holders []*dlock.Lock) {
	t.Helper()
	holders = append(holders, mustLock(t, holderC, k, dlock.WithTTL(time.Minute)))
	permit, err := holderC.Semaphore(k+":sem", 1).TryAcquire(ctxT(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	holders = append(holders, permit)
	lockDone, semDone = make(chan error, 1), make(chan error, 1)
	wait := func(done chan error, acquire func(context.Context) (*dlock.Lock, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := acquire(ctx)
		if err == nil {
			if ttl, terr := l.TTL(ctx); terr != nil || ttl <= 0 {
				err = fmt.Errorf("obtained, but TTL says %v, %v", ttl, terr)
			}
			l.Unlock(ctx)
		}
		done <- err
	}
	go wait(lockDone, func(ctx context.Context) (*dlock.Lock, error) {
		return waiterC.Lock(ctx, k, dlock.WithTTL(10*time.Second))
	})
	go wait(semDone, func(ctx context.Context) (*dlock.Lock, error) {
		return waiterC.Semaphore(k+":sem", 1).Acquire(ctx, dlock.WithTTL(10*time.Second))
	})
	for _, kk := range []string{k, k + ":sem"} {
		eventually(t, kk+"'s waiter queues", func() bool {
			st, err := waiterC.Inspect(ctxT(t), kk)
			return err == nil && st.Waiters == 1
		})
	}
	return lockDone, semDone, holders
}

// waitersQueued waits until n waiters are queued for k, as c sees it.
func waitersQueued(t *testing.T, c *dlock.Client, k string, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d waiter(s) queued for %s", n, k), func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == n
	})
}

// served waits for a wait's end, which must be the lock, and logs how
// long after the fault ended (since) it came.
func served(t *testing.T, what string, done chan error, since time.Time) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: served %v after the fault ended", what, time.Since(since).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatalf("%s: no answer within a minute", what)
	}
}

// The first case: a standalone server is down for 4 s (a crash and
// its supervisor) while a Lock and a Semaphore.Acquire wait with 30 s on
// their contexts. Without persistence the holders' keys and the queues are
// gone when it is back: the waiters line up again and are served.
func TestWaitersRideOutARestartThatLosesTheData(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	holderC, _ := newClient(t, s)
	waiterC, _ := newClient(t, s)
	k := key(t)
	lockDone, semDone, _ := outageWaiters(t, holderC, waiterC, k)
	s.Kill()
	// A Lock that begins during the outage waits for it too.
	lateDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := waiterC.Lock(ctx, k+":late")
		if err == nil {
			l.Unlock(ctx)
		}
		lateDone <- err
	}()
	time.Sleep(4 * time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	served(t, "Lock across the restart", lockDone, back)
	served(t, "Semaphore.Acquire across the restart", semDone, back)
	served(t, "Lock begun during the outage", lateDone, back)
}

// With persistence the holders keep their locks across the restart, and
// the waiters, still in line, are served when the holders let go.
func TestWaitersRideOutARestartThatKeepsTheData(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	holderC, _ := newClient(t, s)
	waiterC, _ := newClient(t, s)
	k := key(t)
	lockDone, semDone, holders := outageWaiters(t, holderC, waiterC, k)
	s.Kill()
	time.Sleep(4 * time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the waiters' keepalives meet the server again
	for _, ch := range []chan error{lockDone, semDone} {
		select {
		case err := <-ch:
			t.Fatalf("a waiter ended while the holders hold: %v", err)
		default:
		}
	}
	for _, h := range holders {
		eventually(t, "the holder's Unlock after the restart", func() bool { return h.Unlock(ctxT(t)) == nil })
	}
	released := time.Now()
	served(t, "Lock after the holder let go", lockDone, released)
	served(t, "Semaphore.Acquire after the holder let go", semDone, released)
}

// A wait whose context ends during an outage says both: it matches the
// context's error and ErrNotObtained, and carries the node's error.
// WithFailFast ends it at the first node error instead.
func TestAWaitEndedDuringAnOutageSaysWhyAndWhatTheNodeSaid(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	k := key(t)
	s.Kill()
	ctx, cancel := context.WithTimeout(ctxT(t), 1500*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, k)
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) {
		t.Fatalf("Lock during an outage: %v, want ErrNotObtained, DeadlineExceeded and a *NodeError", err)
	}
	ctx, cancel = context.WithTimeout(ctxT(t), 20*time.Second)
	defer cancel()
	_, err = c.Semaphore(k, 2).Acquire(ctx, dlock.WithFailFast())
	if !errors.As(err, &ne) || errors.Is(err, dlock.ErrNotObtained) || ctx.Err() != nil {
		t.Fatalf("Acquire with WithFailFast during an outage: %v, want a *NodeError before its context ends", err)
	}
}

// A server that stops answering (paused: connections stay open, requests
// time out) is waited for in line, not ridden out; a wait whose context
// ends meanwhile still says that the node did not answer, not only "not
// obtained".
func TestAWaitEndedWhileTheServerDoesNotAnswerCarriesTheNodeError(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	holderC, _ := newClient(t, s)
	c, _ := newClient(t, s)
	k := key(t)
	mustLock(t, holderC, k, dlock.WithTTL(time.Minute))
	done := make(chan error, 1)
	go func() {
		// Longer than go-redis's default read timeout (3 s), which ends
		// the group's keepalive steps while the server is paused.
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		defer cancel()
		_, err := c.Lock(ctx, k)
		done <- err
	}()
	waitersQueued(t, c, k, 1)
	s.Pause()
	defer s.Resume()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the wait did not end with its context")
	}
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) {
		t.Fatalf("Lock on a paused server: %v, want ErrNotObtained, DeadlineExceeded and a *NodeError", err)
	}
}

// Once the node answers again, a wait that then ends says "not obtained",
// not "Redis was down": neither a waiter that rode out a restart nor one
// that joined just after a pause carries the outage's *NodeError.
func TestAWaitEndedAfterTheNodeIsBackCarriesNoNodeError(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	holderC, _ := newClient(t, s)
	c, _ := newClient(t, s)
	k := key(t)
	mustLock(t, holderC, k, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Lock(ctx, k); done <- err }()
	waitersQueued(t, c, k, 1)
	s.Kill()
	time.Sleep(time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the waiter is back in line", func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == 1
	})
	time.Sleep(2 * time.Second) // its rejoin has been answered
	// A pause long enough for a keepalive to time out, then a newcomer
	// once the node answers again.
	s.Pause()
	time.Sleep(4 * time.Second)
	s.Resume()
	if _, err := holderC.Inspect(ctxT(t), k); err != nil {
		t.Fatal(err)
	}
	nctx, ncancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.Lock(nctx, k)
	ncancel()
	var ne *dlock.NodeError
	if !errors.Is(err, dlock.ErrNotObtained) || errors.As(err, &ne) {
		t.Fatalf("a Lock begun after the pause, on a held key: %v; want not obtained, without a *NodeError", err)
	}
	time.Sleep(time.Second)
	cancel()
	if err := <-done; !errors.Is(err, dlock.ErrNotObtained) || errors.As(err, &ne) {
		t.Fatalf("the waiter that rode out the restart: %v; want not obtained, without a *NodeError", err)
	}
}

// WithFailFast ends a queued wait at the node's first failure, a timeout
// included: on a paused server, before the wait's context ends.
func TestWithFailFastAQueuedWaitEndsWhenThePausedServerTimesOut(t *testing.T) {
	s := redistest.Start(t)
	holderC, _ := newClient(t, s)
	c, _ := newClient(t, s)
	k := key(t)
	mustLock(t, holderC, k, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Lock(ctx, k, dlock.WithFailFast()); done <- err }()
	waitersQueued(t, c, k, 1)
	s.Pause()
	defer s.Resume()
	err := <-done
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ctx.Err() != nil {
		t.Fatalf("Lock with WithFailFast on a paused server: %v (context: %v); want a *NodeError before the context ends", err, ctx.Err())
	}
}

// Errors no waiting can fix end the wait at once, outage or not.
func TestErrorsNoWaitingCanFixEndTheWaitAtOnce(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	reader := readerClient(t, s)
	ctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	if _, err := reader.Lock(ctx, key(t)); !redis.HasErrorPrefix(errors.Unwrap(err), "NOPERM") || ctx.Err() != nil {
		t.Fatalf("Lock without permission: %v, want NOPERM at once", err)
	}
	c, admin := newClient(t, s)
	k := key(t)
	admin.RPush(ctxT(t), k, "x")
	if _, err := c.Lock(ctx, k); !errors.Is(err, dlock.ErrWrongKind) || ctx.Err() != nil {
		t.Fatalf("Lock of a list: %v, want ErrWrongKind at once", err)
	}
}

// A herd behind a proxy that accepts and closes connections while Redis is
// down (as a TCP load balancer does) rides out a restart without
// persistence: 400 waiters on 4 Clients, TTL 1 s, each with 20 s on its
// context, are all served. (Errors of the outage left in the waiters'
// mailboxes once threw away each grant after the restart for a backoff,
// draining the herd at about 8 a second.)
func TestAHerdBehindAProxyRidesOutARestart(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	p, err := torture.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	k := key(t)
	var served atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 400)
	for range 4 {
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
		c := dlock.New(rdb)
		defer rdb.Close()
		defer c.Close()
		for range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				l, err := c.Lock(ctx, k, dlock.WithTTL(time.Second))
				if err != nil {
					errs <- err
					return
				}
				served.Add(1)
				time.Sleep(time.Millisecond)
				l.Unlock(context.Background())
			}()
		}
	}
	eventually(t, "a first grant", func() bool { return served.Load() > 0 })
	s.Kill()
	time.Sleep(3 * time.Second)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	back, before := time.Now(), served.Load()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%d of 400 served; a waiter: %v", served.Load(), err)
	}
	t.Logf("%d served before the kill, the other %d within %v of the restart", before, 400-before, time.Since(back).Round(time.Millisecond))
}

// After a restart that lost the data, the key is granted again as soon as
// the server is back, while the old holder is told only at its next renewal
// (docs/failures.md says so): its Context ends with ErrLost by the end of
// the lease it last renewed, the new holder's fence is above its fence, and
// a guard on a resource that kept its data refuses its writes after the new
// holder's first.
func TestAfterDataLossTheOldHolderIsToldAtItsNextRenewal(t *testing.T) {
	s := redistest.Start(t)
	holderC, _ := newClient(t, s)
	waiterC, _ := newClient(t, s)
	resource := redistest.Start(t).Client(t)
	g := guard.NewRedis(resource)
	k, res := key(t), key(t)+":resource"
	a := mustLock(t, holderC, k, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
	leaseEnd, _ := a.Context().Deadline()
	got := make(chan *dlock.Lock, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := waiterC.Lock(ctx, k, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
		if err != nil {
			t.Error(err)
		}
		got <- b
	}()
	eventually(t, "the waiter queues", func() bool { st, _ := waiterC.Inspect(ctxT(t), k); return st.Waiters == 1 })
	s.Kill()
	time.Sleep(500 * time.Millisecond)
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		t.Fatal("the waiter was not served after the restart")
	}
	defer b.Unlock(ctxT(t))
	if b.Fence() <= a.Fence() {
		t.Fatalf("the new holder's fence %d is not above the old holder's %d", b.Fence(), a.Fence())
	}
	if err := g.For(b).Set(ctxT(t), res, "new", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := g.For(a).Set(ctxT(t), res, "old", time.Minute); !errors.Is(err, guard.ErrStaleFence) && !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("the old holder's write after the new holder's: %v, want it refused", err)
	}
	select {
	case <-a.Context().Done():
	case <-time.After(time.Until(leaseEnd) + 10*time.Second):
		t.Fatal("the old holder was never told")
	}
	if cause := context.Cause(a.Context()); !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("the old holder's cause: %v, want ErrLost", cause)
	}
	if v := resource.Get(ctxT(t), res).Val(); v != "new" {
		t.Fatalf("the resource holds %q, want the new holder's write", v)
	}
}
