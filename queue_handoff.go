package dlock

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/tokens"
)

// handedOff is a grant as the release script published it.
type handedOff struct {
	fence int64
	seq   int64         // the group's step the lease counts from
	lease time.Duration // from the send of step seq
	px    time.Duration // the key's PX from the grant: the TTL, or a shorter claim
}

// handOver delivers the grant a release of this Client's returned to the
// waiter it went to, if that is this Client's: a grant to the releasing
// Client's group is not published, so the reply is its only message; if
// lost, the keepalive finds the grant record ('!'), as for a lost message.
func (gs *groups) handOver(key, msg string) {
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g != nil {
		g.message(msg)
	}
}

// message takes a wake channel message (on the subscriber's goroutine: no
// blocking): a grant is delivered, or passed on if its waiter has gone.
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
	case gone: // at once, even if its leave is under way: as many as grants
		g.c.spawn(func() { g.leave(id, token, 0) })
	}
}

// parseGrant reads a hand-off message, "g id fence seq lease_ms px_ms",
// with strconv, not fmt.Sscanf: it is on the hand-off's path.
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

// release releases token's hold of nm's key on n (node.release). On one
// node it names the Client's group for the key, so that a grant to one of
// its waiters comes back in the reply, unpublished, and carries the joins
// of its deferred waiters (joinFold); the grant is delivered here.
func (c *Client) release(ctx context.Context, n *node, nm *lockNames, token string, fence int64, keep time.Duration, lean bool) (bool, error) {
	var group string
	var f *joinFold
	if len(c.nodes) == 1 && !tokens.Shared(token) { // the FIFO queue is one node's (queue.go)
		group, f = c.groups.releasing(nm.key, token)
	}
	r, err := n.release(ctx, nm, token, fence, keep, lean, group, f.args(nil))
	// Before the hand-off: woken in the next critical section, they would
	// delay its timers (Go's poller sleeps in whole milliseconds).
	f.answered(r.scores)
	if r.grant != "" {
		c.groups.handOver(nm.key, r.grant)
		// Let the readied waiter, the next holder, run now, not only once
		// this goroutine blocks: it keeps a hot key busy.
		runtime.Gosched()
	}
	return r.released, err
}

// releasing is told the Client is about to release its lock on key with
// token: it returns the name of the Client's group for key, or "", and, if
// the group holds the key through that lock, its deferred waiters, whose
// first joins the release script makes (joinFold). Without groups it looks
// nothing up: a group started meanwhile is one started after the lookup.
func (gs *groups) releasing(key, token string) (group string, f *joinFold) {
	if gs.n.Load() == 0 {
		return "", nil
	}
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g == nil {
		return "", nil
	}
	g.mu.Lock()
	if g.holder == nil || g.holder.token != token {
		g.mu.Unlock()
		return g.id, nil
	}
	deferred := g.deferred
	g.holder, g.deferred = nil, nil
	for _, w := range deferred {
		w.mu.Lock()
		w.fold = foldTaken // under g.mu: undefer sees it taken or not at all
		w.mu.Unlock()
		if w.o.hasNodeTimeout {
			w.deliver(nil, false, nil) // its wait for the release starts now (folded)
		}
	}
	g.mu.Unlock()
	if len(deferred) == 0 {
		return g.id, nil
	}
	seq, _ := g.stamp() // before the release is sent: its lease counts from here
	return g.id, &joinFold{g: g, seq: seq, ws: deferred}
}
