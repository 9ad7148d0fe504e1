package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// failoverCase is one deployment that promotes a replica: Sentinel or
// Cluster. keys names the test's keys so that they share the master that
// dies; master and promote find it and wait for its successor.
type failoverCase struct {
	client  *dlock.Client
	nodes   []*redistest.Server
	keys    func(name string) string
	master  func(ctx context.Context) (*redistest.Server, error)
	promote func(old *redistest.Server) (*redistest.Server, error)
}

// TestSentinelFailover and TestClusterFailover run the seeds' central
// scenario with real promotion: the master of the locks dies, a replica
// takes over, and the same Client carries on.
func TestSentinelFailover(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	st := redistest.StartSentinel(t, 2)
	c := dlock.New(st.Client(t))
	defer c.Close()
	base := key(t)
	runFailover(t, failoverCase{
		client: c,
		nodes:  st.Servers,
		keys:   func(name string) string { return base + ":" + name },
		master: st.Master,
		promote: func(old *redistest.Server) (*redistest.Server, error) {
			return st.WaitPromotion(old, time.Minute)
		},
	})
}

func TestClusterFailover(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	c := dlock.New(cl.Client(t))
	defer c.Close()
	tag := "{" + key(t) + "}"
	runFailover(t, failoverCase{
		client: c,
		nodes:  cl.Nodes(),
		keys:   func(name string) string { return tag + ":" + name },
		master: func(ctx context.Context) (*redistest.Server, error) { return cl.MasterOf(ctx, tag) },
		promote: func(old *redistest.Server) (*redistest.Server, error) {
			return cl.WaitPromotion(tag, old, time.Minute)
		},
	})
}

func runFailover(t *testing.T, fc failoverCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := fc.client
	var highest int64
	take := func(name string, opts ...dlock.Option) *dlock.Lock {
		t.Helper()
		l, err := c.TryLock(ctx, fc.keys(name), opts...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		highest = max(highest, l.Fence())
		return l
	}
	// An acknowledged grant, a holder with a waiter queued behind it (the
	// join reaches the replicas before the master dies), and then the
	// seeds' lost grant: the replicas are cut off just before it, and the
	// master dies before they are back.
	acked := take("acked", dlock.WithTTL(30*time.Second), dlock.WithReplicaAck(1, time.Second), dlock.WithAutoRenew())
	held := take("queue", dlock.WithTTL(time.Minute), dlock.WithReplicaAck(1, time.Second))
	served := make(chan error, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer wcancel()
		l, err := c.Lock(wctx, fc.keys("queue"), dlock.WithTTL(time.Minute))
		if err == nil {
			err = l.Unlock(wctx)
		}
		served <- err
	}()
	eventually(t, "the waiter queues", func() bool {
		st, err := c.Inspect(ctx, fc.keys("queue"))
		return err == nil && st.Waiters == 1
	})
	// An election observed across the failover: its acknowledged leader
	// survives, and the next leader after it is reported too.
	elect := c.Election(fc.keys("elect"))
	seen := observed(ctx, elect)
	before, err := elect.Campaign(ctx, "before", dlock.WithTTL(time.Minute), dlock.WithReplicaAck(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	highest = max(highest, before.Fence())
	eventually(t, "Observe reports the leader before the failover", func() bool { return seen().Value == "before" })
	old, err := fc.master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resume, err := redistest.LoseReplication(ctx, old, fc.nodes)
	if err != nil {
		t.Fatal(err)
	}
	lost := take("lost", dlock.WithTTL(20*time.Second), dlock.WithAutoRenew())
	old.Kill()
	killed := time.Now()
	resume()
	if _, err := fc.promote(old); err != nil {
		t.Fatal(err)
	}
	t.Logf("a replica was promoted %v after the kill", time.Since(killed).Round(100*time.Millisecond))

	// The same Client works again once the client library has found the
	// new master (go-redis's own retries and topology refresh).
	var after *dlock.Lock
	eventually(t, "a lock through the same client", func() bool {
		after, err = c.TryLock(ctx, fc.keys("after"), dlock.WithTTL(time.Minute))
		return err == nil
	})
	t.Logf("the same client locked again %v after the kill", time.Since(killed).Round(100*time.Millisecond))
	if after.Fence() <= highest {
		t.Fatalf("fence after the failover %d, not above %d before it", after.Fence(), highest)
	}
	// The acknowledged, auto-renewed grant survived: still held, its lease
	// kept, and Unlock works.
	if ttl, err := acked.TTL(ctx); err != nil || ttl <= 0 || acked.Context().Err() != nil {
		t.Fatalf("the acknowledged grant after the failover: TTL %v, %v", ttl, err)
	}
	if err := acked.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the acknowledged grant: %v", err)
	}
	// Observe kept going across the failover: the next leader is reported.
	if err := before.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the acknowledged leadership: %v", err)
	}
	next, err := elect.Campaign(ctx, "after", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "Observe reports the leader after the failover", func() bool {
		ld := seen()
		return ld.Value == "after" && ld.Term == next.Fence() && ld.Term > before.Fence()
	})
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The waiter queued across the failover rides it out and is served
	// once the holder lets go, within its context.
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	unlocked := time.Now()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("the waiter queued across the failover: %v", err)
		}
		t.Logf("the waiter queued across the failover was served %v after its holder's Unlock", time.Since(unlocked).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatal("the queued waiter hangs after the failover")
	}
	// The lost grant: the new master never had it, so another client can
	// take the lock (the seeds' double holder), with a higher fence; the
	// old holder's lease outlasted the failover, and its next renewal
	// finds the key gone: its Context ends with ErrKeyLost.
	stolen, err := c.TryLock(ctx, fc.keys("lost"), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("the lost grant's key on the new master: %v", err)
	}
	stolenAt := time.Now()
	if stolen.Fence() <= lost.Fence() {
		t.Fatalf("the second holder's fence %d is not above the lost grant's %d", stolen.Fence(), lost.Fence())
	}
	select {
	case <-lost.Context().Done():
		cause := context.Cause(lost.Context())
		if !errors.Is(cause, dlock.ErrKeyLost) {
			t.Fatalf("the lost holder's Context ended with %v, want ErrKeyLost", cause)
		}
		t.Logf("the lost holder was told, %v after the second holder's grant: %v", time.Since(stolenAt).Round(time.Millisecond), cause)
	case <-time.After(time.Minute):
		t.Fatal("the lost holder's Context never ended")
	}
	for _, l := range []*dlock.Lock{after, stolen} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// observed observes e until ctx ends, and returns the last leader it
// reported.
func observed(ctx context.Context, e *dlock.Election) func() dlock.Leader {
	var mu sync.Mutex
	var last dlock.Leader
	obs := e.Observe(ctx)
	go func() {
		for ld := range obs.C {
			mu.Lock()
			last = ld
			mu.Unlock()
		}
	}()
	return func() dlock.Leader {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// A Lock with WithNodeTimeout started while its key's cluster master is
// silent (paused, not dead: no connection is refused) gets the lock once
// a replica has taken over: a node timeout asks the cluster client to
// reload its map of slots, as a read timeout does. (It took about a
// minute, or never came within a review's 36 s: the node timeout did not
// count as the node being unreachable.)
func TestALockWithANodeTimeoutRidesOutASilentClusterMaster(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	c := dlock.New(cl.Client(t))
	defer c.Close()
	tag := "{" + key(t) + "}"
	mustLock(t, c, tag+":warm").Unlock(ctxT(t))
	old, err := cl.MasterOf(ctxT(t), tag)
	if err != nil {
		t.Fatal(err)
	}
	old.Pause()
	defer old.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := c.Lock(ctx, tag+":k", dlock.WithNodeTimeout(300*time.Millisecond))
		if err == nil {
			err = l.Unlock(ctx)
		}
		done <- err
	}()
	if _, err := cl.WaitPromotion(tag, old, time.Minute); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Lock across the failover: %v", err)
		}
		t.Logf("locked %v after the promotion", time.Since(promoted).Round(100*time.Millisecond))
	case <-time.After(30 * time.Second): // without the reload: about a minute
		t.Fatal("Lock not served 30 s after a replica took over")
	}
}
