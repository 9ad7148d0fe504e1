package dlock

import (
	"context"
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

// release releases token's hold of nm's key on n (node.release).
func (c *Client) release(ctx context.Context, n *node, nm *lockNames, token string, fence int64, keep time.Duration, lean bool) (bool, error) {
	return n.release(ctx, nm, token, fence, keep, lean)
}
