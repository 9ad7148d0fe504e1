package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// joinReply is the join script's answer.
type joinReply struct {
	granted bool
	fence   int64
	px      time.Duration // when granted: the key's PX, counted from the join
	score   string        // when queued: the waiter's place
}

// join runs the join script (scripts/join.lua).
func (n *node) join(ctx context.Context, nm *lockNames, w *queuedWaiter, group string, seq int64, score string) (joinReply, error) {
	res, err := n.Run(ctx, joinScript, nm.queueKeys(), w.token, w.o.ttl.Milliseconds(), w.id, group, seq, score, n.Publish(), nm.wake, w.o.fenceKeep().Milliseconds()).Slice()
	if err != nil {
		return joinReply{}, n.fail("wait", err)
	}
	if len(res) != 3 {
		return joinReply{}, n.fail("wait", errors.New("unexpected reply from the join script"))
	}
	if ok, _ := res[0].(int64); ok != 1 {
		s, _ := res[2].(string)
		return joinReply{score: s}, nil
	}
	fence, err := parseFence(res[1])
	if err != nil {
		return joinReply{}, n.fail("wait", err)
	}
	px, _ := res[2].(int64)
	if px <= 0 {
		return joinReply{}, n.fail("wait", fmt.Errorf("unexpected grant expiry %d from the join script", px))
	}
	return joinReply{granted: true, fence: fence, px: time.Duration(px) * time.Millisecond}, nil
}

// keepaliveReply is the keepalive script's report.
type keepaliveReply struct {
	grantTo string // a waiter of the group the last hand-off went to
	held    bool   // the key still holds that waiter's token
	grant   handedOff
	missing []string // roll call ids neither queued nor granted
}

// keepalive runs the keepalive script (scripts/keepalive.lua).
func (n *node) keepalive(ctx context.Context, nm *lockNames, group string, seq int64, roll []string) (keepaliveReply, error) {
	args := make([]any, 0, 4+len(roll))
	args = append(args, group, seq, n.Publish(), nm.wake)
	for _, id := range roll {
		args = append(args, id)
	}
	res, err := n.Run(ctx, keepaliveScript, nm.queueKeys(), args...).Slice()
	if err != nil {
		return keepaliveReply{}, n.fail("wait", err)
	}
	var r keepaliveReply
	if len(res) != 2 {
		return r, n.fail("wait", errors.New("unexpected reply from the keepalive script"))
	}
	if g, _ := res[0].([]any); len(g) == 6 {
		r.grantTo, _ = g[0].(string)
		held, _ := g[1].(int64)
		r.held = held == 1
		fence, _ := g[2].(string)
		r.grant.fence, _ = strconv.ParseInt(fence, 10, 64)
		r.grant.seq, _ = g[3].(int64)
		lease, _ := g[4].(int64)
		r.grant.lease = time.Duration(lease) * time.Millisecond
		px, _ := g[5].(int64)
		r.grant.px = time.Duration(px) * time.Millisecond
	}
	missing, _ := res[1].([]any)
	for _, m := range missing {
		if id, ok := m.(string); ok {
			r.missing = append(r.missing, id)
		}
	}
	return r, nil
}

// leave takes a waiter out of the queue; if it had been granted the lock
// meanwhile, the lock goes on to the next waiter. It reports whether it had.
func (n *node) leave(ctx context.Context, nm *lockNames, token, id string) (bool, error) {
	v, err := n.Run(ctx, leaveScript, nm.queueKeys(), token, id, n.Publish(), nm.wake).Int64()
	if err != nil {
		return false, n.fail("leave", err)
	}
	return v == 1, nil
}
