package dlock

// The hand-off as a waiter receives it: the grant message a release
// publishes (or returns to its own Client), and its delivery.

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// handedOff is a grant as the release script published it.
type handedOff struct {
	fence int64
	seq   int64         // the group's step the lease counts from
	lease time.Duration // from the send of step seq
	px    time.Duration // the key's PX from the grant: the TTL, or a shorter claim
}

// handOver delivers the grant of a release this Client made, as its reply
// told it, to the waiter it went to if that waiter is this Client's: the
// waiter need not wait for the message to come round through the
// subscription. A release that names the Client's group (releasing) is not
// published at all when it goes to that group's waiter, so the reply is
// its only message; should the reply be lost, the group's keepalive finds
// the grant (its record, '!'), as it finds one whose message was lost.
// Grants to other Clients' waiters are theirs to hear.
func (gs *groups) handOver(key, msg string) {
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g != nil {
		g.message(msg)
	}
}

// message receives a message of the wake channel (from the subscriber's
// goroutine; it must not block): a grant to one of the group's waiters is
// delivered, one to a waiter that has gone is passed on.
func (g *waitGroup) message(payload string) {
	id, h, ok := parseGrant(payload)
	if !ok {
		return
	}
	g.mu.Lock()
	w := g.waiters[id]
	token, gone := g.departed[id]
	g.mu.Unlock()
	switch {
	case w != nil:
		w.deliver(h, false, nil)
	case gone:
		g.c.spawn(func() { g.leave(id, token, 0) })
	}
}

// parseGrant reads a hand-off message: "g id fence seq lease_ms px_ms". (It
// runs on a hand-off's path, between the release's answer and the next
// holder's wake: fields and strconv, not fmt.Sscanf, which took several
// microseconds.)
func parseGrant(payload string) (id string, h *handedOff, ok bool) {
	f := strings.Fields(payload)
	if len(f) != 6 || f[0] != "g" {
		return "", nil, false
	}
	fence, err1 := strconv.ParseInt(f[2], 10, 64)
	seq, err2 := strconv.ParseInt(f[3], 10, 64)
	lease, err3 := strconv.ParseInt(f[4], 10, 64)
	px, err4 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || fence <= 0 {
		return "", nil, false
	}
	return f[1], &handedOff{fence: fence, seq: seq,
		lease: time.Duration(lease) * time.Millisecond, px: time.Duration(px) * time.Millisecond}, true
}

// release releases token's hold of nm's key on n (node.release), and the
// queue decides the hand-off: on one node, the release names the Client's
// group waiting for the key, if any, so that a grant to one of its waiters
// comes back in the reply instead of being published, and carries the
// joins of the group's deferred waiters (joinFold); the grant is then
// delivered here, after the joined waiters have been told.
func (c *Client) release(ctx context.Context, n *node, nm *lockNames, token string, fence int64, keep time.Duration, lean bool) (bool, error) {
	var group string
	var f *joinFold
	if len(c.nodes) == 1 && !shared(token) { // the FIFO queue is one node's (queue.go)
		group, f = c.groups.releasing(nm.key, token)
	}
	r, err := n.release(ctx, nm, token, fence, keep, lean, group, f.args(nil))
	// Before the hand-off: the next holder's critical section begins
	// there, and waking the waiters after it began would make a timer it
	// sets fire later (Go's network poller sleeps whole milliseconds).
	f.answered(r.scores)
	if r.grant != "" {
		c.groups.handOver(nm.key, r.grant)
		// The waiter just readied would otherwise run only once this
		// goroutine blocks (its caller's next request, say): let it run
		// now, since the lock's next holder is the one that keeps a hot
		// key busy.
		runtime.Gosched()
	}
	return r.released, err
}
