package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// keepalive runs the group's keepalive step, the sign of life that keeps
// its waiters in line and finds a grant they missed (with a roll call),
// until the group retires (no waiter for groupLinger) or the Client closes.
func (g *waitGroup) keepalive() {
	defer g.watch.Cancel()
	t := time.NewTimer(g.period())
	defer t.Stop()
	lastRoll := time.Now()
	for {
		timed := false
		select {
		case <-t.C:
			timed = true
		case <-g.emptied:
		case <-g.c.done:
			return
		}
		switch stopped, lingers := g.c.groups.retire(g); {
		case stopped:
			return
		case lingers > 0: // no waiter: no step
			t.Reset(lingers)
			continue
		case !timed: // a waiter came back before the timer
			continue
		}
		var roll []string
		if time.Since(lastRoll) >= aliveWindow {
			roll, lastRoll = g.rollCall(), time.Now()
		}
		g.step(roll)
		t.Reset(g.period())
	}
}

// period is the keepalive period for the group's shortest TTL.
func (g *waitGroup) period() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	ttl := claimTime
	for _, w := range g.waiters {
		ttl = min(ttl, w.o.ttl)
	}
	return keepalivePeriod(ttl)
}

// rollCall lists the waiters whose join has been answered.
func (g *waitGroup) rollCall() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for id, w := range g.waiters {
		w.mu.Lock()
		if w.joined {
			ids = append(ids, id)
		}
		w.mu.Unlock()
	}
	return ids
}

// step runs one keepalive, acts on its report, and retries failed leaves.
func (g *waitGroup) step(roll []string) {
	timeout := g.nodeTimeout()
	seq, _ := g.stamp()
	r, err, left := transport.Await(g.c.ctx, g.c.work, timeout, func(ctx context.Context) (keepaliveReply, error) {
		ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
		return g.n.keepalive(ctx, g.nm, g.id, seq, roll)
	}, nil)
	if left {
		err = g.n.Unanswered("wait", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.failing = err
	if err != nil {
		g.stepFailed(err)
		return
	}
	g.reported(r)
	for id, token := range g.departed {
		if g.departing.Below() { // else the leaves under way come first (a storm of give-ups)
			g.c.spawn(func() { g.leave(id, token, 0) })
		}
	}
}

// stepFailed ends the waits a keepalive's failure err ends: all, unless err
// is a timeout, which ends only those with a node timeout or WithFailFast
// (the others wait on, and report err if their context ends before the
// node answers again: stepError). g.mu is held.
func (g *waitGroup) stepFailed(err error) {
	if g.c.ctx.Err() != nil {
		return
	}
	slow := isSlow(err)
	for _, w := range g.waiters {
		if !slow || w.o.hasNodeTimeout || w.o.failFast {
			w.deliver(nil, false, err)
		}
	}
}

// stepError returns the last keepalive's error if it failed, nil if it
// succeeded.
func (g *waitGroup) stepError() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.failing
}

// reported acts on a keepalive's report r: it delivers a grant to the
// waiter it names, and sends back to the queue a waiter whose grant lapsed
// unseen and those the queue is missing. g.mu is held.
func (g *waitGroup) reported(r keepaliveReply) {
	if w := g.waiters[r.grantTo]; r.grantTo != "" && w != nil {
		if r.held {
			w.deliver(&r.grant, false, nil)
		} else {
			w.deliver(nil, true, nil) // rejoin
		}
	}
	for _, id := range r.missing {
		if w := g.waiters[id]; w != nil {
			w.deliver(nil, true, nil)
		}
	}
}

// nodeTimeout is the keepalive's bound: the shortest node timeout among the
// waiters that set one, or none.
func (g *waitGroup) nodeTimeout() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	var d time.Duration
	for _, w := range g.waiters {
		if w.o.hasNodeTimeout && (d == 0 || w.o.nodeTimeout < d) {
			d = w.o.nodeTimeout
		}
	}
	return d
}
