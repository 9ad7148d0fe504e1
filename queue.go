package dlock

import (
	"context"
	"errors"
	"time"
)

// Semaphores' and read-write locks' waiting in line (one node; a mutex's
// wait is the line's: line_wait.go). Newcomers cannot jump the line: the
// acquire scripts refuse a key with a queue. The queue's parts, a file each:
//
//	queue.go           the design, its timing, and waitQueued (Lock's entry)
//	queue_waiter.go    a waiter: one Lock call in line, its mailbox and loop
//	queue_group.go     a Client's waiters on one key: subscription, joins, leaving
//	queue_keepalive.go the group's sign of life and roll call
//	queue_handoff.go   the grant message and its delivery
//	queue_scripts.go   the queue's scripts as a node runs them
//
// The lease of a hand-off (safety). The release runs at server time Tg,
// gives the key PX px, and publishes lease = (Tg - Tk) + px, Tk being when
// the server ran the group's last step k. The waiter recorded Sk <= Tk
// before sending step k, and counts its lease as Sk + lease - drift(lease):
// no later than Tg + px, when the key expires, however late the message.
//
// What a hand-off gives: a claim, min(TTL, claimTime), which the waiter's
// join confirms for the whole TTL before Lock returns, so a waiter that died unseen holds the line up
// for claimTime at most. A grant with less than a quarter of the claim left
// is refused, and the waiter joins again at its place.
const (
	aliveWindow = time.Second
	claimTime   = aliveWindow
	// waitStep is the longest keepalive period (keepalivePeriod): a
	// hand-off's lease counts from a recent step.
	waitStep = aliveWindow / 3
	// queueKeep is how long the queue's keys outlive the last step.
	queueKeep = 2 * aliveWindow
)

// keepalivePeriod returns how often a group whose shortest TTL is ttl
// steps: five TTLs, at least 20 ms, at most waitStep.
func keepalivePeriod(ttl time.Duration) time.Duration {
	return min(max(5*ttl, 20*time.Millisecond), waitStep)
}

// waitQueued waits in key's queue until the lock is granted or ctx ends.
// It is a shared hold's path on a single node after a failed first attempt.
func (c *Client) waitQueued(ctx context.Context, nm *lockNames, o options) (*Lock, error) {
	done, ok := c.begin() // Close waits for this call, leave included
	if !ok {
		return nil, notObtained(ErrClosed)
	}
	defer done()
	parent := ctx
	ctx, unbind := c.bind(ctx)
	defer unbind()
	w, err := newQueuedWaiter(o)
	if err != nil {
		return nil, err
	}
	g := c.groups.enter(c, nm, w)
	select { // a grant published before the subscription is caught by a keepalive
	case <-g.ready:
	default:
		t := time.NewTimer(waitStep)
		select {
		case <-g.ready:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	l, err := w.wait(ctx, g)
	if err != nil && ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), ErrClosed) && parent.Err() == nil {
			return nil, w.out.ended(ErrClosed)
		}
		return nil, w.out.ended(parent.Err())
	}
	return l, err
}
