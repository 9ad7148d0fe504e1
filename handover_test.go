package dlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// A handover whose release's reply is lost (so the waiter is never told
// in-process) to a waiter whose TTL is shorter than the keepalive's period:
// the waiter, alive and first in line, is still served first, by its next
// keepalive, as a claim serves a waiter of another Client (found by
// review: the key, set for the waiter's 50 ms, expired before the
// keepalive, and the waiter behind it went first).
func TestALostHandoverKeepsTheWaitersPlace(t *testing.T) {
	for _, handover := range []bool{true, false} {
		t.Run(fmt.Sprintf("handover=%v", handover), func(t *testing.T) { lostHandover(t, handover) })
	}
}

func lostHandover(t *testing.T, handover bool) {
	s := redistest.Start(t)
	hook := &lostReply{}
	ardb := s.Client(t)
	ardb.AddHook(hook)
	a := dlock.New(ardb)
	t.Cleanup(func() { a.Close() })
	b, rdb := newClient(t, s)
	first := a // the holder's Client: a handover
	if !handover {
		first, _ = newClient(t, s) // another: a claim
	}
	if err := mustLock(t, a, key(t)+":warm").Unlock(ctxT(t)); err != nil { // the scripts loaded
		t.Fatal(err)
	}
	for round := range 3 {
		k := fmt.Sprintf("%s:%d", key(t), round)
		holder := mustLock(t, a, k, dlock.WithTTL(time.Minute))
		served := make(chan string, 2)
		wait := func(c *dlock.Client, who string) {
			l, err := c.Lock(ctxT(t), k, dlock.WithTTL(50*time.Millisecond))
			if err != nil {
				t.Errorf("%s: %v", who, err)
			}
			served <- who
			if l != nil {
				_ = l.Unlock(context.Background())
			}
		}
		go wait(first, "first")
		eventually(t, "the first waiter is queued", func() bool { return queueLen(t, rdb, k) == 1 })
		go wait(b, "second")
		eventually(t, "the second waiter is queued", func() bool { return queueLen(t, rdb, k) == 2 })
		hook.arm(holder.Token())
		_ = holder.Unlock(ctxT(t)) // its reply lost
		if who := <-served; who != "first" {
			t.Errorf("round %d: the second waiter was served before the first", round)
		}
		<-served
	}
}

// lostReply is a go-redis hook that, once armed with a token, lets the next
// script that carries it run and then loses its reply, as a connection that
// breaks after the server ran it.
type lostReply struct {
	processOnly
	mu    sync.Mutex
	token string
}

func (h *lostReply) arm(token string) { h.mu.Lock(); h.token = token; h.mu.Unlock() }

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil || h.token == "" || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			return err
		}
		for _, arg := range cmd.Args() {
			if s, ok := arg.(string); ok && s == h.token {
				h.token = ""
				cmd.SetErr(fmt.Errorf("the reply was lost (test)"))
				return cmd.Err()
			}
		}
		return nil
	}
}

// A fast release whose reply is lost (it ran: the key is gone), with no
// line: the full release after it finds the key gone, Unlock reports the
// lost reply's error (it cannot tell its own release from an expiry), and
// the Lock's Context ends all the same (found by review: it stayed open
// for the lease's minute).
func TestALostFastReleaseEndsTheLease(t *testing.T) {
	s := redistest.Start(t)
	hook := &lostReply{}
	rdb := s.Client(t)
	rdb.AddHook(hook)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	k := key(t)
	holder := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	hook.arm(holder.Token())
	if err := holder.Unlock(ctxT(t)); err == nil {
		t.Fatal("Unlock whose release's reply was lost returned nil")
	}
	if n := rdb.Exists(ctxT(t), k).Val(); n != 0 {
		t.Fatal("the key is still there")
	}
	select {
	case <-holder.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Lock's Context has not ended after Unlock")
	}
}

// stallFirst is a go-redis hook that stalls the first script call, once
// armed, for d or until its context ends (as a stalled node would, to a
// client that honours its context), without sending it.
type stallFirst struct {
	processOnly
	armed   atomic.Bool
	d       time.Duration
	stalled atomic.Int32
}

func (h *stallFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && h.armed.CompareAndSwap(true, false) {
			h.stalled.Add(1)
			t := time.NewTimer(h.d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
				return ctx.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// WithNodeTimeout bounds each node's answer ("a stalled node costs at most
// d, whatever the go-redis clients' timeouts"), the first acquire too,
// which lockFast runs before any driver (found by review: it had the
// caller's context only, and Lock waited out the stall).
func TestNodeTimeoutBoundsTheFastAcquire(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	rdb := s.Client(t)
	h := &stallFirst{d: 8 * time.Second}
	rdb.AddHook(h)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	k := key(t)
	// the scripts loaded, the Client warm
	if err := mustLock(t, c, k+":warm").Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	h.armed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(ctx, k, dlock.WithTTL(10*time.Second), dlock.WithNodeTimeout(200*time.Millisecond))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	defer l.Unlock(context.Background())
	if h.stalled.Load() != 1 {
		t.Fatalf("the hook stalled %d calls", h.stalled.Load())
	}
	// With a 200 ms node timeout the stalled first acquire is given up on at
	// 200 ms and retried; 4 s is twenty node timeouts.
	if took > 4*time.Second {
		t.Fatalf("Lock took %v with WithNodeTimeout(200ms): the stalled first acquire was waited for past the node timeout", took)
	}
}
