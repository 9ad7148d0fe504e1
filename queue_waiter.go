package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/tokens"
)

// queuedWaiter is one Lock call waiting in line (queue.go). The group
// delivers to its mailbox; its own goroutine (wait) acts on what arrives.
type queuedWaiter struct {
	id, token string
	o         options
	px        time.Duration // what a hand-off gives: min(TTL, claimTime)

	signal chan struct{} // something is in the mailbox
	mu     sync.Mutex    // guards the mailbox and joined
	grant  *handedOff    // the latest grant delivered
	check  bool          // rejoin: a grant lapsed, or the roll call missed it
	err    error         // the group's keepalive failed
	joined bool          // answered a join: the roll call may include it
	score  string        // its place in line, from its first join
	out    outage        // the node's outage it is riding out, if any (its own goroutine's)
}

func newQueuedWaiter(o options) (*queuedWaiter, error) {
	token, err := tokens.New(o.kind, o.value, o.candidate)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &queuedWaiter{
		id: hex.EncodeToString(id[:]), token: token, o: o,
		px: min(o.ttl, claimTime), signal: make(chan struct{}, 1), score: "0",
	}, nil
}

// deliver puts a grant, a rejoin or an error in the mailbox; never blocks.
func (w *queuedWaiter) deliver(h *handedOff, check bool, err error) {
	w.mu.Lock()
	if h != nil {
		w.grant = h
	}
	w.check = w.check || check
	if err != nil && w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *queuedWaiter) take() (h *handedOff, check bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, check, err = w.grant, w.check, w.err
	w.grant, w.check, w.err = nil, false, nil
	return h, check, err
}

// news reports whether the mailbox holds a grant or a call to join again.
func (w *queuedWaiter) news() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grant != nil || w.check
}

// forgetOutage drops an error w would ride out (the keepalive could not
// reach the node) as w joins again, which is the riding out. Left there, it
// would end w's wait once the node is back, throwing away the grant that
// woke w for a backoff and rejoin while the key stays granted to w.
func (w *queuedWaiter) forgetOutage() {
	w.mu.Lock()
	if w.err != nil && !w.o.failFast && transient(w.err) {
		w.err = nil
	}
	w.mu.Unlock()
}

// wait joins the queue and waits for the grant. Whenever it returns without
// the lock, the waiter has left the queue (or its leave is under way after
// a step still in flight, or remembered by the group).
func (w *queuedWaiter) wait(ctx context.Context, g *waitGroup) (*Lock, error) {
	// Held back while the group's departures are many (departingLimit).
	if err := g.departing.Wait(ctx); err != nil {
		g.exit(w, false) // never joined: nothing to leave
		return nil, err
	}
	check := true // the first join
	for {
		if check {
			w.forgetOutage()
			l, err, inFlight := g.join(ctx, w)
			if errors.Is(err, errGrantLapsed) || err != nil && w.out.rideOut(ctx, g.c.done, w.signal, w.news, w.o, err) {
				continue // check stays true: join again, at its place (a grant that woke it is confirmed)
			}
			if l != nil || err != nil {
				g.exit(w, l == nil && !inFlight)
				return l, err
			}
		}
		select {
		case <-w.signal:
		case <-ctx.Done():
			w.out.still(g.stepError()) // a node that stopped answering: "down", not "busy"
			g.exit(w, true)
			return nil, ctx.Err()
		}
		var l *Lock
		var err error
		if l, check, err = w.received(g); err != nil && w.out.rideOut(ctx, g.c.done, w.signal, w.news, w.o, err) {
			check = true // the keepalive failed: join again once the node answers
		} else if l != nil || err != nil {
			g.exit(w, err != nil)
			return l, err
		}
	}
}

// received acts on w's mailbox: the lock, from a grant with enough lease
// left; an error (the keepalive failed); or check: w must join again (asked
// to, or a grant too short to use: the join confirms it, or requeues w).
func (w *queuedWaiter) received(g *waitGroup) (l *Lock, check bool, err error) {
	h, check, err := w.take()
	if err != nil || h == nil {
		return nil, check, err
	}
	if l := g.accept(w, h); l != nil {
		return l, false, nil
	}
	return nil, true, nil
}
