package dlock

import (
	"context"
	"errors"
	"time"
)

// Waiting in line
//
// On one node (standalone or cluster), a waiter does not poll and is not
// woken with everyone else: it joins a FIFO queue kept in Redis, in the lock
// key's hash slot, ordered by the server's time when it joined (never a
// client clock). The release script deletes the lock and, in the same atomic
// step, sets it to the first live waiter's token and publishes the grant on
// the key's wake channel, naming the waiter (unless the waiter is in the
// releasing Client's own group: that Client has the grant in its reply and
// hands it over itself, handOver). Newcomers (TryLock, or Lock's
// first attempt) cannot jump the line: the acquire scripts refuse a key
// that has a queue, and the lock is never free while someone live waits.
// (The lean acquire of the uncontended path declares no queue key: it
// learns of a queue from the mark that every step of a waiter sets on
// the key's fencing counter, scripts/mark.lua, and leaves a marked key to
// the full acquire.)
//
// A Client's own turn-taking. A waiter whose Client holds the key through
// a grant of its line (a goroutine that locks again right after
// unlocking, while another of its Client's goroutines holds the key)
// defers its join until that holder's release is about to be sent, or
// joinDefer has passed (deferJoin): the release script then makes its
// join, just before it releases (joinfold.go), instead of the join
// landing in the middle of the next critical section. Its place in line
// is its join's, as anyone's: a waiter of another Client that joins
// while it defers goes ahead of it. (The group remembers its holder only
// while the group lasts: once it has retired, groupLinger after its last
// waiter left, nobody defers.)
//
// What a waiter costs. A Client's waiters on one key form a group
// (waitGroup). The group subscribes to the key's wake channel through the
// node's one subscription connection (internal/transport/subscriber.go), and the subscriber hands
// each grant to the waiter it names; no waiter holds a connection, and the
// user's pool is used only for each waiter's join (one script, unless a
// release makes it) and for the group's keepalive step: one script every
// keepalive period, however many waiters the group has. So waiting costs a Client, per node (per cluster
// master), one pub/sub connection and, briefly, one pooled connection per
// step. A group outlives its last waiter by groupLinger, subscribed and
// without steps, so that goroutines taking turns on a key do not
// subscribe again on every turn.
//
// Liveness. A waiter is alive while its group is: the join and every
// keepalive record the group's sign of life (server time and step
// number), and a waiter whose group has shown none for aliveWindow is dead
// and skipped. A waiter that stops waiting leaves the queue as Lock
// returns: its leave is waited for leaveWait at most (when a step was in
// flight, the leave follows that step's answer), and finishes in work that
// Close waits for; one whose leave failed or is still under way is
// remembered by
// the group, which passes on any grant it is given and tries again at each
// keepalive. If the holder's key expires instead of being released, the
// next keepalive of any group hands the lock to the first in line.
//
// Lost messages. A grant is also recorded in the queue (the grant record),
// and each keepalive reports a grant to one of the group's waiters, so a
// message lost while the subscription reconnects costs at most one
// keepalive period; a roll call every aliveWindow finds waiters that are
// neither queued nor granted (their grant lapsed unseen), which rejoin.
//
// The lease of a hand-off (safety). The release script runs at server
// time Tg, gives the key PX px, and publishes lease = (Tg - Tk) + px, where
// Tk is when the server ran the group's last step, k, on its own clock
// (rounded down). The waiter recorded when it sent step k, Sk, before
// sending it, so Sk <= Tk in real time, and it counts its lease as
// Sk + lease - drift(lease): no later than Tg + px, when the key expires,
// with the drift margin for the clocks' rates over the whole interval.
// This holds however long ago step k was and however late the message
// arrives; a late message only leaves less of the lease.
//
// What a hand-off gives (px). A waiter of the releasing Client's own group
// gets its TTL: its Client is alive, running the release. Any other gets
// a claim, min(TTL, claimTime), so that a waiter that died just before it
// was granted holds the line up for claimTime at most. A waiter granted a
// claim shorter than its TTL joins again before its Lock returns, and that
// join, which shows it alive, gives the key its whole TTL: when Lock
// returns, the key holds the TTL asked for.
//
// Progress (liveness). A grant is never refused for the age of the step
// it counts from. A waiter refuses it only when less than a quarter of
// min(TTL, claimTime) is left; it then joins again at once, keeping its
// score: if the key still holds its token the join gives it its whole TTL
// counted from that join, and if the grant lapsed meanwhile the waiter is
// back at the head of the line.
//
// Redlock does not queue: each node would order its waiters on its own, and
// a release would grant different waiters on different nodes. There,
// waiters are woken by release notifications and retry after a random
// pause (acquire.go); fairness is best-effort.
const (
	aliveWindow = time.Second
	claimTime   = aliveWindow
	// waitStep is the longest keepalive period; a group whose waiters have
	// short TTLs steps more often (keepalivePeriod), so that a hand-off's
	// lease counts from a recent step.
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
// It is Lock's path on a single node after a failed first attempt.
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
