package dlock_test

import (
	"context"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
)

// lockBehind starts waiter A and then waiter B on key k in Client c's line
// while k is held by a Lock of another Client, which it then unlocks: A
// obtains k from the line with a minute's TTL, and B waits behind it, at
// most 10 s. It returns A's lock, and B's outcome once it comes.
func lockBehind(t *testing.T, c, first *dlock.Client, k string) (a *dlock.Lock, b <-chan error) {
	t.Helper()
	h := mustLock(t, first, k, dlock.WithTTL(time.Minute))
	got := lockLater(t, c, k, dlock.WithTTL(time.Minute))
	time.Sleep(100 * time.Millisecond)
	out := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, k, dlock.WithTTL(time.Minute))
		if err == nil {
			l.Unlock(context.Background())
		}
		out <- err
	}()
	time.Sleep(100 * time.Millisecond)
	if err := h.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if a = <-got; a == nil {
		t.FailNow()
	}
	return a, out
}

// A hold obtained in a Client's line that is revoked and removed frees the
// lock for the next waiter in that line too, not only for other Clients:
// the release messages end its wait for its Client's holder. (It waited
// out the holder's TTL; found by review, older than internal/listen.)
func TestARevokedHoldFreesTheNextWaiterInItsClientsLine(t *testing.T) {
	nodes := startNodes(t, 3)
	first, _ := newRedlock(t, nodes)
	c, _ := newRedlock(t, nodes)
	revoker, _ := newRedlock(t, nodes)
	k := key(t)
	a, b := lockBehind(t, c, first, k)
	defer a.Unlock(context.Background())
	st, err := revoker.Inspect(ctxT(t), k)
	if err != nil || !st.Held {
		t.Fatalf("Inspect %+v %v", st, err)
	}
	if r, err := revoker.Revoke(ctxT(t), k, dlock.Revocation{Holder: st.Holder, By: "ops", Grace: 100 * time.Millisecond}); err != nil || r.Removed != 1 {
		t.Fatalf("Revoke %+v %v", r, err)
	}
	if err := <-b; err != nil {
		t.Fatalf("the next waiter in the revoked holder's line: %v", err)
	}
}

// loseReplies is a go-redis hook that, while on, lets scripts run on the
// server and then loses their replies (a connection reset after the
// request was written).
type loseReplies struct{ on *atomic.Bool }

func (loseReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h loseReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.on.Load() && err == nil && cmd.Name() == "evalsha" {
			err = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			cmd.SetErr(err)
		}
		return err
	}
}
func (h loseReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An Unlock that released the key on every node but lost two of three
// replies (no verdict, so the Client is not told) frees the lock for the
// next waiter in its line: the release messages end its wait. (It waited
// out the holder's TTL; found by review.)
func TestAnUnlockWithLostRepliesFreesTheNextWaiterInItsLine(t *testing.T) {
	nodes := startNodes(t, 3)
	first, _ := newRedlock(t, nodes)
	var lose atomic.Bool
	var rdbs []redis.UniversalClient
	for i, s := range nodes {
		rdb := redis.NewClient(s.Options())
		t.Cleanup(func() { rdb.Close() })
		if i < 2 {
			rdb.AddHook(loseReplies{&lose})
		}
		rdbs = append(rdbs, rdb)
	}
	c := dlock.New(rdbs...)
	t.Cleanup(func() { c.Close() })
	a, b := lockBehind(t, c, first, key(t))
	lose.Store(true)
	err := a.Unlock(ctxT(t))
	lose.Store(false)
	t.Logf("the Unlock with lost replies: %v", err)
	if err := <-b; err != nil {
		t.Fatalf("the next waiter in the line: %v", err)
	}
}
