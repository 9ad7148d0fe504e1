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
	"github.com/dlock-go/dlock/internal/redistest"
)

func TestLockWaitsForTheHolderToUnlock(t *testing.T) {
	holderC, _ := newClient(t, shared())
	waiterC, _ := newClient(t, shared())
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
	c, _ := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(200*time.Millisecond)) // never unlocked
	l, err := c.Lock(ctxT(t), k)
	if err != nil {
		t.Fatalf("Lock after the holder's TTL: %v", err)
	}
	_ = l.Unlock(ctxT(t))
}

func TestLockWaitsForAKeySetByHand(t *testing.T) {
	c, rdb := newClient(t, shared())
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
	c, _ := newClient(t, shared())
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
	c, rdb := newClient(t, shared())
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
	holderC, _ := newClient(t, shared())
	waiterC, _ := newClient(t, shared())
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
	c, _ := newClient(t, shared())
	l := mustLock(t, c, key(t))
	c.Close()
	if _, err := c.TryLock(ctxT(t), key(t)); !errors.Is(err, dlock.ErrClosed) {
		t.Errorf("TryLock after Close: %v, want ErrClosed", err)
	}
	// As a wait that Close ended: not obtained, because closed.
	if _, err := c.Lock(ctxT(t), key(t)); !errors.Is(err, dlock.ErrClosed) || !errors.Is(err, dlock.ErrNotObtained) {
		t.Errorf("Lock after Close: %v, want ErrClosed and ErrNotObtained", err)
	}
	// Locks already held can still be released.
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Errorf("Unlock after Close: %v", err)
	}
}

func TestManyWaitersAllGetTheLockInTurn(t *testing.T) {
	const waiters = 10
	c, _ := newClient(t, shared()) // one Client: its waiters share one subscription
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

// A grant whose answer comes after the lease it gives is over is not a
// lock: with every reply late by 15 ms, or by less than the TTL but more
// than the TTL less the drift margin (8.5 ms of the shortest TTL), Lock
// keeps waiting (its acquire confirms the grant anew, or passes it on when
// the caller gives up) and never returns a lock already lost. (It used to
// return the queue's grant as it came, its Context already ended; and the
// line first counted the lease without the drift, found by review.)
func TestLockNeverReturnsALeaseAlreadyOver(t *testing.T) {
	for _, late := range []time.Duration{15 * time.Millisecond, 8500 * time.Microsecond} {
		lockWithLateReplies(t, late)
	}
}

func lockWithLateReplies(t *testing.T, late time.Duration) {
	rdb := shared().Client(t)
	rdb.AddHook(lateReplies(late))
	c := dlock.New(rdb)
	defer c.Close()
	k := key(t)
	for i := 0; i < 3; i++ {
		ctx, cancel := context.WithTimeout(ctxT(t), 300*time.Millisecond)
		l, err := c.Lock(ctx, k, dlock.WithTTL(dlock.MinTTL))
		cancel()
		if err != nil {
			if !errors.Is(err, dlock.ErrNotObtained) {
				t.Errorf("Lock: %v, want ErrNotObtained", err)
			}
			continue
		}
		if l.Context().Err() != nil {
			t.Errorf("Lock returned a lock whose lease was over: %v", context.Cause(l.Context()))
		}
		_ = l.Unlock(context.Background())
	}
	// Whatever the waits left behind, the key is free again at once or
	// within its TTL.
	other, _ := newClient(t, shared())
	eventually(t, "the key is free", func() bool {
		l, err := other.TryLock(ctxT(t), k, dlock.WithTTL(time.Second))
		if err != nil {
			return false
		}
		return l.Unlock(ctxT(t)) == nil
	})
}

// lateReplies is a go-redis hook that hands each reply to its caller d
// after it came.
type lateReplies time.Duration

func (lateReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d lateReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		time.Sleep(time.Duration(d))
		return err
	}
}

func (d lateReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		time.Sleep(time.Duration(d))
		return err
	}
}

// An acquire refused for want of replica acknowledgements is given back
// before the refusal returns, unless the caller's context ended while the
// give-back was under way, which its error then says: a refusal that does
// not match the context's error never leaves the key held. (Every request
// sent 15 ms late; contexts that end before, during and after the
// give-back.)
func TestARefusedReplicaAckLeavesTheKeyFreeOrSaysTheContextEnded(t *testing.T) {
	rdb := shared().Client(t)
	rdb.AddHook(lateRequests(15 * time.Millisecond))
	c := dlock.New(rdb)
	defer c.Close()
	admin := shared().Client(t)
	base := key(t)
	var keys []string
	for d := 10 * time.Millisecond; d <= 80*time.Millisecond; d += 5 * time.Millisecond {
		// A key each: an attempt whose context ended before its request
		// went out may still be granted, and given back, later.
		k := fmt.Sprintf("%s:%v", base, d)
		keys = append(keys, k)
		ctx, cancel := context.WithTimeout(ctxT(t), d)
		_, err := c.TryLock(ctx, k, dlock.WithReplicaAck(1, 10*time.Millisecond))
		cancel()
		held := admin.Exists(ctxT(t), k).Val() == 1
		switch {
		case err == nil:
			t.Fatalf("context %v: obtained without a replica to acknowledge", d)
		case errors.Is(err, context.DeadlineExceeded):
		case !errors.Is(err, dlock.ErrNoReplicaAck):
			t.Fatalf("context %v: %v, want ErrNoReplicaAck or the context's error", d, err)
		case held:
			t.Fatalf("context %v: %v, and the refused grant is still held", d, err)
		}
	}
	eventually(t, "every key is free", func() bool { return admin.Exists(ctxT(t), keys...).Val() == 0 })
}

// A TryLock with WithReplicaAck whose caller gives up while its acquire
// waits for a connection leaves no key held. The acquire and its WAIT take
// a connection of the pool of their own; sent after the caller had gone,
// one granted the key to nobody, and its give-back, in line for the pool
// behind others, timed out there and left the key held for its TTL (found
// by review: 300 goroutines whose contexts ended within 3 ms kept the
// pool's line seconds long).
func TestReplicaAckTryLockGivenUpWaitingForAConnectionLeavesNoKeyHeld(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	master := redistest.Start(t)
	redistest.StartReplica(t, master)
	giveUpWaitingForAConnection(t, master, dlock.WithReplicaAck(1, time.Second))
}

// giveUpWaitingForAConnection has a TryLock give up while its acquire
// waits for the pool's one connection, which the test holds; then another
// user, in line behind the acquire, holds the connection for three pool
// timeouts. After Close the key must be free.
func giveUpWaitingForAConnection(t *testing.T, s *redistest.Server, o ...dlock.Option) {
	opts := s.Options()
	opts.PoolSize, opts.PoolTimeout = 1, time.Second
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c := dlock.New(rdb)
	defer c.Close()
	k := key(t)

	busy := rdb.Conn() // the pool's one connection, until busy is closed
	defer busy.Close()
	if err := busy.Ping(ctxT(t)).Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 50*time.Millisecond)
	_, err := c.TryLock(ctx, k, append([]dlock.Option{dlock.WithTTL(time.Minute)}, o...)...)
	cancel()
	if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock without a connection until its context ended: %v, want ErrNotObtained and the context's error", err)
	}

	// The next user gets in line for the connection, and holds it for
	// three pool timeouts: longer than a give-back waits for it.
	next := rdb.Conn()
	defer next.Close()
	inLine := rdb.PoolStats().PendingRequests
	pinged := make(chan error, 1)
	go func() { pinged <- next.Ping(ctxT(t)).Err() }()
	eventually(t, "the next user is in line", func() bool { return rdb.PoolStats().PendingRequests > inLine })
	busy.Close()
	if err := <-pinged; err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * opts.PoolTimeout)
	next.Close()

	c.Close() // waits for the Client's cleanups
	admin := s.Client(t)
	if admin.Exists(ctxT(t), k).Val() != 0 {
		t.Fatalf("after Close the key is held, for %v more: granted after its caller gave up, and not given back", admin.PTTL(ctxT(t), k).Val())
	}
}

// A grant that answers after its TryLock gave up is given back, also when
// the give-back's first try (the fast release and the full one it falls
// back on) fails without reaching the server (here a pool timeout,
// injected): it is sent again until the server answers, as an uncertain
// one is. (It was sent once: the key stayed held for its TTL,
// found by review with WithReplicaAck, whose give-backs timed out in a
// pool too busy.)
func TestALateGrantWhoseGiveBackFailsOnceIsGivenBack(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	rdb := s.Client(t)
	var scripts atomic.Int32
	c := dlock.New(rdb)
	defer c.Close()
	k := key(t)
	if err := mustLock(t, c, k+":warm").Unlock(ctxT(t)); err != nil { // the scripts are loaded
		t.Fatal(err)
	}
	rdb.AddHook(scriptFaults{&scripts, func(i int32) (time.Duration, bool) {
		switch i {
		case 1: // the acquire, sent after TryLock gave up
			return time.Second, false
		case 2, 3: // the give-back's first try: the fast release, then the full one it falls back on
			return 0, true
		}
		return 0, false
	}})
	ctx, cancel := context.WithTimeout(ctxT(t), 200*time.Millisecond)
	_, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute)) // its acquire is sent a second late
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock: %v, want the context's error", err)
	}
	admin := s.Client(t)
	eventually(t, "the late grant given back", func() bool { return scripts.Load() > 3 && admin.Exists(ctxT(t), k).Val() == 0 })
}

// A TryLock whose grant too few replicas acknowledged gives it back before
// it returns with one try; when that try fails (here every script sent
// alone fails with a pool timeout, injected), the retries go on in the
// background and TryLock returns at once, also without a deadline of its
// own (found by review: it waited for the retries' whole bound), until
// Close.
func TestATryLockWhoseGiveBackFailsReturnsAndRetriesInTheBackground(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	master := redistest.Start(t)
	replica := redistest.StartReplica(t, master)
	rdb := master.Client(t)
	c := dlock.New(rdb)
	defer c.Close()
	k := key(t)
	if err := mustLock(t, c, k+":warm").Unlock(ctxT(t)); err != nil { // the scripts are loaded
		t.Fatal(err)
	}
	replica.Pause() // no acknowledgement: the grant is given back
	defer replica.Resume()
	// The retries (every script after the in-time try's two) wait until
	// TryLock has returned: a TryLock that waited for them would hold
	// them back until the gate gives up, and say so in waited.
	var tries atomic.Int32
	returned := make(chan struct{})
	var waited atomic.Bool
	// Once hold is set, the next retry's script waits in held until
	// closing: the count before Close is read while no try can run.
	var hold atomic.Bool
	held, closing := make(chan struct{}), make(chan struct{})
	var heldOnce, closingOnce sync.Once
	defer closingOnce.Do(func() { close(closing) }) // a failed test's Close does not wait on the gate
	rdb.AddHook(scriptFaults{&tries, func(i int32) (time.Duration, bool) {
		if i > 2 {
			select {
			case <-returned:
			case <-time.After(10 * time.Second):
				waited.Store(true)
			}
			if hold.Load() {
				heldOnce.Do(func() { close(held) })
				<-closing
			}
		}
		return 0, true
	}}) // scripts sent alone: the give-backs, not the acquire and its WAIT
	_, err := c.TryLock(context.Background(), k, dlock.WithReplicaAck(1, 100*time.Millisecond))
	close(returned)
	if !errors.Is(err, dlock.ErrNoReplicaAck) {
		t.Fatalf("TryLock: %v, want ErrNoReplicaAck", err)
	}
	if waited.Load() {
		t.Fatal("TryLock returned after its give-back's retries, want after its one try (a fast release and the full one)")
	}
	eventually(t, "the give-back retried in the background", func() bool { return tries.Load() > 4 })
	// Once Close has begun, a failed try is the last: Close does not wait
	// out the retries' bound (found by review: a node that could not be
	// reached held Close for it, cleanupTimeout, some fifty tries). A try
	// may have begun just before Close, and one more follows it: at most
	// two tries of two scripts each. The retries (100 ms apart) are held
	// from before the count is read until Close has begun: a test
	// goroutine stalled between the two saw three tries (CI's load).
	hold.Store(true)
	<-held
	before := tries.Load()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	canceled, cancel := context.WithCancel(context.Background())
	cancel() // nothing is sent: TryLock says only whether the Client is closed
	eventually(t, "Close has begun", func() bool {
		_, err := c.TryLock(canceled, k)
		return errors.Is(err, dlock.ErrClosed)
	})
	closingOnce.Do(func() { close(closing) })
	<-closed
	if n := tries.Load() - before; n > 4 {
		t.Fatalf("%d give-back scripts during Close, want at most two tries (a fast release and the full one each)", n)
	}
}

// scriptFaults is a go-redis hook for the scripts sent alone (EVALSHA,
// EVAL; not those of a pipeline): it counts them in n, and fault(i), given
// the count, says whether to fail the i-th with a pool timeout, before it
// is sent, after delaying it by delay.
type scriptFaults struct {
	n     *atomic.Int32
	fault func(i int32) (delay time.Duration, fail bool)
}

func (scriptFaults) DialHook(next redis.DialHook) redis.DialHook { return next }

func (scriptFaults) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (f scriptFaults) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		delay, fail := f.fault(f.n.Add(1))
		time.Sleep(delay)
		if fail {
			cmd.SetErr(redis.ErrPoolTimeout)
			return redis.ErrPoolTimeout
		}
		return next(ctx, cmd)
	}
}

// lateRequests is a go-redis hook that sends each request d after it was
// made.
type lateRequests time.Duration

func (lateRequests) DialHook(next redis.DialHook) redis.DialHook { return next }

func (d lateRequests) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmd)
	}
}

func (d lateRequests) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(d))
		return next(ctx, cmds)
	}
}

// cancelAfterScript is a go-redis hook that, once armed, cancels a context
// just after the next script's answer has come: the caller's context ends
// while its attempt is being judged.
type cancelAfterScript struct {
	processOnly
	armed  atomic.Bool
	cancel context.CancelFunc
}

func (h *cancelAfterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			h.cancel()
		}
		return err
	}
}

// A Lock whose context ends while its first attempt finds the key taken
// says why it stopped, as a wait that its context ended does: the error
// matches ErrNotObtained and the context's error. On one node, and on
// Redlock where the attempt splits the nodes (one grants, two are taken).
func TestALockWhoseContextEndsDuringItsAttemptSaysSo(t *testing.T) {
	for _, n := range []int{1, 3} {
		c, rdbs := newRedlock(t, startNodes(t, n))
		k := key(t)
		for _, rdb := range rdbs[len(rdbs)/2:] {
			rdb.Set(ctxT(t), k, "someone else's", time.Minute)
		}
		ctx, cancel := context.WithCancel(ctxT(t))
		hook := &cancelAfterScript{cancel: cancel}
		for _, rdb := range rdbs {
			rdb.AddHook(hook)
		}
		hook.armed.Store(true)
		_, err := c.Lock(ctx, k)
		if !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("%d node(s): Lock whose context ended during its attempt: %v, want ErrNotObtained and Canceled", n, err)
		}
		cancel()
	}
}
