package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"
)

// Waiting in line
//
// On one node (standalone or cluster), a waiter does not poll and is not
// woken with everyone else: it joins a FIFO queue kept in Redis, in the lock
// key's hash slot, ordered by the server's time when it joined (never a
// client clock). The release script deletes the lock and, in the same atomic
// step, sets it to the first live waiter's token and pushes the grant onto
// that waiter's own list, on which the waiter is blocked (BLPOP). The
// hand-off costs the new holder one message from the server, not a wake-up
// and a new race; newcomers (TryLock, or Lock's first attempt) cannot jump
// the queue, because the lock is never free while someone live is waiting.
//
// A waiter proves it is alive with a step of the wait script every
// waitStep; one that has not for aliveWindow is dead and is skipped. A
// hand-off gives the lock for at most claimTime; the new holder extends it
// to its TTL at once, so a waiter that died just before it was granted holds
// up the queue for claimTime at most. A waiter that gives up (its context
// ended) leaves the queue, and passes the lock on if it was granted it
// meanwhile. If the holder's key expires instead of being released, the
// next wait step of any waiter hands the lock to the first in line.
//
// A grant's lease counts from the send time of a wait step that the server
// ran before the grant (the grant carries its sequence number), so the
// holder's estimate of its validity stays conservative however long it
// waited.
//
// Redlock does not queue: each node would order its waiters on its own, and
// a release would grant different waiters on different nodes. There,
// waiters are woken by release notifications and retry after a random
// pause (acquire.go); fairness is best-effort.
const (
	aliveWindow = time.Second
	waitStep    = aliveWindow / 3
	claimTime   = aliveWindow
)

// aliveMillis is aliveWindow as the wait script takes it (boxed once, not
// per call). The scripts have claimTime as a constant of their own
// (prelude.lua).
var aliveMillis any = aliveWindow.Milliseconds()

// lockQueued waits in the key's queue until the lock is granted or ctx
// ends. It is Lock's path on a single node after a failed first attempt.
func (c *Client) lockQueued(ctx context.Context, key string, o options, contended *bool) (*Lock, error) {
	n := c.nodes[0]
	nm := c.names.get(key)
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	var idBytes [8]byte
	_, _ = rand.Read(idBytes[:])
	id := hex.EncodeToString(idBytes[:])
	step := min(waitStep, n.blockLimit)

	leave := func() {
		c.cleanup(func(ctx context.Context) { _, _ = n.leave(ctx, nm, token, id) })
	}
	leaveLate := func(*node, waitReply, error) { leave() }
	one := []*node{n}

	// sent[seq] is when wait step seq was sent: a grant that names seq
	// happened after the server ran that step, so after that time.
	sent := map[int64]time.Time{}
	for seq := int64(1); ; seq++ {
		sent[seq] = time.Now()
		a := fanout(c, ctx, one, 0, "wait", func(ctx context.Context, n *node) (waitReply, error) {
			return n.wait(ctx, nm, token, id, o.ttl, seq)
		}, leaveLate)[0]
		if a.err == nil && !a.v.granted { // queued: block on the grant list for a step
			*contended = true
			a = fanout(c, ctx, one, 0, "wait", func(ctx context.Context, n *node) (waitReply, error) {
				st, _, err := n.awaitGrant(ctx, nm, id, step)
				return st, err
			}, leaveLate)[0]
		}
		if a.err == nil && a.v.granted {
			if l := c.granted(nm, token, o, a.v, sent); l != nil {
				return l, nil
			}
			c.passOn(ctx, n, nm, token, id)
			continue
		}
		switch {
		case ctx.Err() != nil:
			if !a.abandoned {
				leave()
			}
			return nil, notObtained(ctx.Err())
		case a.err != nil:
			leave()
			return nil, a.err
		case c.closed.Load():
			// Noticed within a wait step of Close.
			leave()
			return nil, notObtained(ErrClosed)
		}
		delete(sent, seq-1) // a grant names the latest step the server ran: seq or seq+1
	}
}

// granted turns a grant into a Lock. Its lease counts from the send time of
// the wait step the grant names, for the expiry the key was given. A
// hand-off gives only a short claim; a lock still held a third of the way
// into it is extended to its TTL in the background, and the lease follows.
//
// A grant that arrives when its lease may already be over (the hand-off or
// its message was held up: a paused server, a slow network) is of no use:
// granted returns nil, and the caller passes the lock on and waits again.
func (c *Client) granted(nm *lockNames, token string, o options, st waitReply, sent map[int64]time.Time) *Lock {
	from, ok := sent[st.seq]
	if !ok {
		// Cannot happen: the script names a step it ran, and we keep the
		// last two. Count from the oldest we have, the safer choice.
		for _, t := range sent {
			if from.IsZero() || t.Before(from) {
				from = t
			}
		}
	}
	if !time.Now().Before(from.Add(st.px - drift(st.px))) {
		return nil
	}
	l := newLock(c, nm, token, st.fence, o, from, st.px)
	if st.px < o.ttl {
		// Most holds are short: extend only if the lock is still held a
		// third of the way into the claim, which leaves two thirds of it
		// for the extension to land.
		c.spawn(func() {
			t := time.NewTimer(time.Until(from.Add(st.px / 3)))
			defer t.Stop()
			select {
			case <-t.C:
			case <-l.stop:
				return
			case <-l.lease.ctx.Done():
				return
			case <-c.done:
				return
			}
			ctx, cancel := context.WithDeadline(context.Background(), l.lease.validUntil())
			defer cancel()
			_, _ = l.renew(ctx, o.ttl)
		})
	}
	return l
}

// passOn gives back a grant that came too late to use: the lock goes to the
// next waiter (or is freed), and this waiter queues again.
func (c *Client) passOn(ctx context.Context, n *node, nm *lockNames, token, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := n.leave(ctx, nm, token, id); err != nil {
		c.warn("dlock: could not pass on a grant that came too late; it expires by its claim",
			slog.String("key", nm.key), slog.Any("err", err))
	}
}
