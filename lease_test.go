package dlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/torture"
)

// waitDone waits, generously, for ctx to end and returns its cause.
func waitDone(t *testing.T, ctx context.Context, what string) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the lock's context did not end", what)
		return nil
	}
}

func TestAutoRenewKeepsAShortLockThroughLongWork(t *testing.T) {
	c, _ := newClient(t, shared())
	other, _ := newClient(t, shared())
	k := key(t)
	// The TTL leaves room for a loaded machine's pauses between renewals.
	l := mustLock(t, c, k, dlock.WithTTL(time.Second), dlock.WithAutoRenew())

	// 3 s of work, three TTLs: others keep failing all along.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if _, err := other.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("another client's TryLock during renewed work: %v, want ErrNotObtained", err)
		}
		if err := l.Context().Err(); err != nil {
			t.Fatalf("the lock's context ended during renewed work: %v", context.Cause(l.Context()))
		}
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock after renewed work: %v", err)
	}
}

func TestOverwrittenKeyEndsTheContextWithErrLost(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
	rdb.Set(ctxT(t), k, "someone-else", time.Minute)

	// The next renewal (within TTL/3 = 1 s) finds the token replaced.
	if cause := waitDone(t, l.Context(), "overwritten key"); cause != dlock.ErrKeyLost || !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("cause = %v, want ErrKeyLost", cause)
	}
	if err := l.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock after loss: %v, want ErrNotHeld", err)
	}
	if got := rdb.Get(ctxT(t), k).Val(); got != "someone-else" {
		t.Fatalf("Unlock after loss changed the key to %q", got)
	}
}

func TestTheContextDeadlineComesBeforeTheTTL(t *testing.T) {
	c, _ := newClient(t, shared())
	const ttl = 2 * time.Second
	l := mustLock(t, c, key(t), dlock.WithTTL(ttl))
	dl, ok := l.Context().Deadline()
	// It counts from before the request was sent: right after the grant,
	// at most TTL - drift (2s/100 + 2ms) remains.
	if left := time.Until(dl); !ok || left > ttl-22*time.Millisecond {
		t.Fatalf("%v left right after acquire (ok=%v), want at most TTL - drift", left, ok)
	}
}

// A paused Redis answers nothing, renewals included: the holder must be told
// by its own clock, before the server could let anyone else in.
func TestPausedRedisEndsTheContextBeforeTheTTL(t *testing.T) {
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	const ttl = time.Second
	start := time.Now()
	l := mustLock(t, c, key(t), dlock.WithTTL(ttl), dlock.WithAutoRenew())
	s.Pause()
	defer s.Resume()

	dl, _ := l.Context().Deadline()
	if left := time.Until(dl); left >= ttl {
		t.Fatalf("%v left after acquire: the context would outlive the key", left)
	}
	if cause := waitDone(t, l.Context(), "paused Redis"); !errors.Is(cause, dlock.ErrLeaseExpired) || !errors.Is(cause, dlock.ErrLost) {
		t.Fatalf("cause = %v, want ErrLeaseExpired (matching ErrLost)", cause)
	}
	t.Logf("context ended %v after acquire start (TTL %v)", time.Since(start), ttl)
}

func TestMaxHoldEndsTheContextAtTheCeiling(t *testing.T) {
	c, rdb := newClient(t, shared())
	other, _ := newClient(t, shared())
	k := key(t)
	const maxHold = 2500 * time.Millisecond
	start := time.Now()
	l := mustLock(t, c, k, dlock.WithTTL(time.Second), dlock.WithAutoRenew(), dlock.WithMaxHold(maxHold))

	dl, _ := l.Context().Deadline()
	if dl.After(start.Add(maxHold)) {
		t.Fatalf("deadline %v past the ceiling %v", dl, start.Add(maxHold))
	}
	if cause := waitDone(t, l.Context(), "max hold"); cause != dlock.ErrMaxHold {
		t.Fatalf("cause = %v, want ErrMaxHold", cause)
	}
	if err := l.Extend(ctxT(t), time.Minute); !errors.Is(err, dlock.ErrMaxHold) && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend past the ceiling: %v, want ErrMaxHold or ErrNotHeld", err)
	}
	// No renewal went past the ceiling: the key runs out and others get in.
	eventually(t, "another client gets the lock after the ceiling", func() bool {
		_, err := other.TryLock(ctxT(t), k)
		return err == nil
	})
	_ = rdb
}

func TestMaxHoldLowersALongerTTL(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(time.Minute), dlock.WithMaxHold(2*time.Second))
	if pttl := rdb.PTTL(ctxT(t), k).Val(); pttl > 2*time.Second {
		t.Fatalf("PTTL = %v, want at most the 2s ceiling", pttl)
	}
}

func TestUnlockEndsTheContextAndNoRenewalRecreatesTheKey(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, rdb := newClient(t, shared())
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(150*time.Millisecond), dlock.WithAutoRenew())
	time.Sleep(200 * time.Millisecond) // a renewal or two
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if cause := context.Cause(l.Context()); cause != dlock.ErrReleased {
		t.Fatalf("cause after Unlock = %v, want ErrReleased", cause)
	}
	time.Sleep(300 * time.Millisecond) // several renewal intervals
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Fatal("the key is back after Unlock")
	}
	c.Close()
}

func TestCloseStopsTheWatchdogAndTheLeaseRunsOut(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, _ := newClient(t, shared())
	l := mustLock(t, c, key(t), dlock.WithTTL(200*time.Millisecond), dlock.WithAutoRenew())
	c.Close()
	if cause := waitDone(t, l.Context(), "closed client"); !errors.Is(cause, dlock.ErrLeaseExpired) {
		t.Fatalf("cause = %v, want ErrLeaseExpired", cause)
	}
}

// A renewal that fails (here: the server refuses writes while out of
// memory) is retried within the lease, and the lock survives the outage.
func TestFailedRenewalIsRetriedWithinTheLease(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	c, rdb := newClient(t, s)
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(3*time.Second), dlock.WithAutoRenew())
	if err := rdb.ConfigSet(ctxT(t), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the renewal at 1 s fails, and its retries
	if err := rdb.ConfigSet(ctxT(t), "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past the first lease: only a retried renewal keeps it
	if err := l.Context().Err(); err != nil {
		t.Fatalf("the lock's context ended: %v", context.Cause(l.Context()))
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestExtendMovesTheContextDeadline(t *testing.T) {
	c, _ := newClient(t, shared())
	l := mustLock(t, c, key(t), dlock.WithTTL(time.Second))
	before, _ := l.Context().Deadline()
	if err := l.Extend(ctxT(t), time.Minute); err != nil {
		t.Fatal(err)
	}
	after, _ := l.Context().Deadline()
	if !after.After(before.Add(30 * time.Second)) {
		t.Fatalf("deadline moved from %v to %v, want about a minute later", before, after)
	}
	time.Sleep(1200 * time.Millisecond) // past the first estimate
	if err := l.Context().Err(); err != nil {
		t.Fatalf("context ended at the old deadline: %v", context.Cause(l.Context()))
	}
}

func TestExtendFindingTheLockGoneEndsTheContext(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	rdb.Del(ctxT(t), k)
	if err := l.Extend(ctxT(t), time.Minute); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend: %v, want ErrNotHeld", err)
	}
	if cause := context.Cause(l.Context()); cause != dlock.ErrKeyLost {
		t.Fatalf("cause = %v, want ErrKeyLost", cause)
	}
}

func TestDoRunsFnUnderTheLockAndUnlocks(t *testing.T) {
	c, rdb := newClient(t, shared())
	other, _ := newClient(t, shared())
	k := key(t)
	errWork := errors.New("work failed")
	err := c.Do(ctxT(t), k, func(ctx context.Context) error {
		if _, err := other.TryLock(ctx, k); !errors.Is(err, dlock.ErrNotObtained) {
			t.Errorf("TryLock inside Do: %v, want ErrNotObtained", err)
		}
		if _, ok := ctx.Deadline(); !ok {
			t.Error("fn's context has no deadline")
		}
		return errWork
	})
	if !errors.Is(err, errWork) || errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want fn's error alone", err)
	}
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Fatal("Do left the key held")
	}
}

// Do with no function is bad input, refused before anything is locked.
func TestDoWithoutAFunctionIsInvalid(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	if err := c.Do(ctxT(t), k, nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("Do(nil) = %v, want ErrInvalidArgument", err)
	}
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Fatal("Do(nil) locked the key")
	}
}

func TestDoReportsErrLostWhenTheLockIsLostWhileFnRuns(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	err := c.Do(ctxT(t), k, func(ctx context.Context) error {
		rdb.Set(ctx, k, "someone-else", time.Minute) // the lock is taken away
		<-ctx.Done()
		return ctx.Err()
	}, dlock.WithTTL(600*time.Millisecond))
	if !errors.Is(err, dlock.ErrKeyLost) || !errors.Is(err, dlock.ErrLost) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want ErrKeyLost (so ErrLost) and fn's context.Canceled", err)
	}
	if got := rdb.Get(ctxT(t), k).Val(); got != "someone-else" {
		t.Fatalf("the new holder's key became %q", got)
	}
}

// fn returns before any renewal: the final Unlock is what finds the key
// gone, and Do says so as a renewal would have.
func TestDoReportsErrKeyLostWhenItsUnlockFindsTheKeyGone(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	err := c.Do(ctxT(t), k, func(ctx context.Context) error {
		return rdb.Set(ctx, k, "someone-else", time.Minute).Err()
	}, dlock.WithTTL(time.Minute))
	if !errors.Is(err, dlock.ErrKeyLost) || !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Do = %v, want ErrKeyLost, ErrLost and Unlock's ErrNotHeld", err)
	}
	if got := rdb.Get(ctxT(t), k).Val(); got != "someone-else" {
		t.Fatalf("the new holder's key became %q", got)
	}
}

func TestDoUnlocksWhenFnPanics(t *testing.T) {
	c, rdb := newClient(t, shared())
	k := key(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the panic to continue", r)
			}
		}()
		_ = c.Do(ctxT(t), k, func(ctx context.Context) error { panic("boom") })
	}()
	if rdb.Exists(ctxT(t), k).Val() != 0 {
		t.Fatal("Do left the key held after a panic")
	}
}

func TestDoGivesUpWhenTheContextEndsWhileWaiting(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	ran := false
	err := c.Do(ctx, k, func(context.Context) error { ran = true; return nil })
	if ran || !errors.Is(err, dlock.ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do on a held key: ran=%v err=%v", ran, err)
	}
}

func TestBadMaxHoldIsRefused(t *testing.T) {
	c, _ := newClient(t, shared())
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond} {
		if _, err := c.TryLock(ctxT(t), key(t), dlock.WithMaxHold(d)); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("WithMaxHold(%v): %v, want ErrInvalidArgument", d, err)
		}
	}
}

// A Context first asked for after the lease ran out is done the moment it
// is returned, with the cause.
func TestContextAskedForAfterTheLeaseIsAlreadyDone(t *testing.T) {
	c, _ := newClient(t, shared())
	for i := 0; i < 5; i++ {
		l := mustLock(t, c, key(t), dlock.WithTTL(100*time.Millisecond))
		time.Sleep(150 * time.Millisecond)
		ctx := l.Context()
		if ctx.Err() == nil {
			t.Fatalf("try %d: the Context of a lease that ended 50 ms ago is not done", i)
		}
		if cause := context.Cause(ctx); !errors.Is(cause, dlock.ErrLeaseExpired) {
			t.Fatalf("try %d: cause %v, want ErrLeaseExpired", i, cause)
		}
	}
}

// Once a Lock's lease has ended, Extend fails and the key is not extended:
// a caller that believes the error is never left holding a key it does not
// know of.
func TestExtendAfterTheLeaseEndedExtendsNothing(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	c, rdb := newClient(t, shared())
	for i := 0; i < 5; i++ {
		k := key(t)
		// 1 s TTL: the lease ends ~12 ms before the key expires.
		l := mustLock(t, c, k, dlock.WithTTL(time.Second))
		<-l.Context().Done()
		err := l.Extend(ctxT(t), time.Minute)
		if err == nil || !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("Extend after the lease ended: %v, want ErrNotHeld", err)
		}
		if pttl := rdb.PTTL(ctxT(t), k).Val(); pttl > 2*time.Second {
			t.Fatalf("try %d: Extend failed but the key now lives %v", i, pttl)
		}
	}
}

// A renewal whose answer comes after the lease ended has extended the key
// on the server: the Lock says the lease expired, and gives the key back
// rather than leave it held for the new TTL by a holder told it is lost.
func TestALateRenewalGivesTheKeyBack(t *testing.T) {
	s := redistest.Start(t)
	p, err := torture.NewProxy(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 10 * time.Second})
	c := dlock.New(rdb)
	defer rdb.Close()
	defer c.Close()
	admin := s.Client(t)
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Second))
	if err := l.Extend(ctxT(t), time.Second); err != nil { // loads the script
		t.Fatal(err)
	}
	p.SetDelay(600 * time.Millisecond) // the Extend lands in time (0.6 s), its answer after the lease (1.2 s)
	err = l.Extend(ctxT(t), time.Minute)
	p.SetDelay(0)
	if !errors.Is(err, dlock.ErrLeaseExpired) {
		t.Fatalf("Extend answered after the lease: %v, want ErrLeaseExpired", err)
	}
	eventually(t, "the key is given back", func() bool { return admin.Exists(ctxT(t), k).Val() == 0 })
}

// From its deadline on, a lease's Context is done, and says why, though
// the timer that ends it may not have run yet: a holder that looks at the
// clock's edge is never told it still holds.
func TestALeaseContextIsDoneFromItsDeadlineOn(t *testing.T) {
	c, _ := newClient(t, shared())
	for i := 0; i < 30; i++ {
		l := mustLock(t, c, key(t), dlock.WithTTL(30*time.Millisecond))
		ctx := l.Context()
		dl, _ := ctx.Deadline()
		for time.Now().Before(dl) {
		}
		if ctx.Err() == nil {
			t.Fatalf("round %d: Err() is nil %v past the deadline", i, time.Since(dl))
		}
		if !errors.Is(context.Cause(ctx), dlock.ErrLeaseExpired) {
			t.Fatalf("round %d: cause %v, want ErrLeaseExpired", i, context.Cause(ctx))
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("round %d: Done is open past the deadline", i)
		}
	}
}

// Do's fn context is done from the lease's deadline on as well (found by
// review: it followed the timer). The server is paused, so no renewal
// moves the deadline.
func TestDosContextIsDoneFromTheLeasesDeadlineOn(t *testing.T) {
	s := redistest.Start(t)
	c, _ := newClient(t, s)
	for i := 0; i < 5; i++ {
		_ = c.Do(ctxT(t), key(t), func(ctx context.Context) error {
			s.Pause()
			defer s.Resume()
			dl, _ := ctx.Deadline()
			for time.Now().Before(dl) {
			}
			if ctx.Err() == nil {
				t.Errorf("round %d: Err() is nil %v past the deadline", i, time.Since(dl))
			}
			select {
			case <-ctx.Done():
			default:
				t.Errorf("round %d: Done is open past the deadline", i)
			}
			return nil
		}, dlock.WithTTL(150*time.Millisecond))
	}
}
