package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/gate"
	"github.com/dlock-go/dlock/internal/transport"
)

// waitGroup is a Client's waiters on one key (queue.go): it owns their wake
// subscription, their keepalive step and the log of its sends.
type waitGroup struct {
	c     *Client
	n     *node
	nm    *lockNames
	id    string          // this group's name in the queue
	ready <-chan struct{} // closed once the wake channel is subscribed
	watch *transport.Watch

	mu        sync.Mutex
	waiters   map[string]*queuedWaiter
	departed  map[string]string // id -> token: gone, leave not yet confirmed
	departing gate.Limit        // leaves under way, and joins given up unanswered (a leave follows)
	seq       int64
	sent      []stepSent    // recent steps, in seq order
	emptied   chan struct{} // the last waiter has gone (see groupLinger)
	idle      time.Time     // since when the group has had no waiter; zero while it has
	failing   error         // the last keepalive's error, until a keepalive succeeds
	stopped   bool
}

// groupLinger is how long a group stays subscribed after its last waiter
// left, so goroutines taking turns on a key need not resubscribe each turn.
const groupLinger = 100 * time.Millisecond

type stepSent struct {
	seq int64
	at  time.Time
}

// groups is a Client's wait groups, by key.
type groups struct {
	mu sync.Mutex
	m  map[string]*waitGroup
	// n is len(m), written under mu, read without: a Client without waiters
	// takes no lock and looks nothing up per release.
	n atomic.Int32
}

// enter adds w to the Client's group for nm's key, starting one if none.
func (gs *groups) enter(c *Client, nm *lockNames, w *queuedWaiter) *waitGroup {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[nm.key]
	if g == nil {
		g = newWaitGroup(c, nm)
		if gs.m == nil {
			gs.m = map[string]*waitGroup{}
		}
		gs.m[nm.key] = g
		gs.n.Store(int32(len(gs.m)))
	}
	g.mu.Lock()
	g.waiters[w.id] = w
	g.idle = time.Time{}
	g.mu.Unlock()
	return g
}

func newWaitGroup(c *Client, nm *lockNames) *waitGroup {
	var id [8]byte
	_, _ = rand.Read(id[:])
	g := &waitGroup{
		c: c, n: c.nodes[0], nm: nm, id: hex.EncodeToString(id[:]),
		waiters: map[string]*queuedWaiter{}, departed: map[string]string{},
		departing: gate.Limit{Max: departingLimit}, emptied: make(chan struct{}, 1),
	}
	g.watch, g.ready = g.n.Watch(nm.wake, g.message)
	c.spawn(g.keepalive)
	return g
}

// stamp numbers a step and records when it is sent (just before it is).
func (g *waitGroup) stamp() (int64, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	now := time.Now()
	for len(g.sent) > 0 && now.Sub(g.sent[0].at) > 3*aliveWindow {
		g.sent = g.sent[1:]
	}
	g.sent = append(g.sent, stepSent{g.seq, now})
	return g.seq, now
}

// sentAt returns when step seq was sent, if still in the log (a grant names
// a step at most aliveWindow older).
func (g *waitGroup) sentAt(seq int64) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.sent), func(i int) bool { return g.sent[i].seq >= seq })
	if i < len(g.sent) && g.sent[i].seq == seq {
		return g.sent[i].at, true
	}
	return time.Time{}, false
}

// join runs the join script for w: its first join, or a rejoin that keeps
// its place (and confirms a grant that came too late). It returns the lock
// when granted, or an error; inFlight: the step went unanswered (ctx, node
// timeout), and its answer will be followed by w's leave.
func (g *waitGroup) join(ctx context.Context, w *queuedWaiter) (l *Lock, err error, inFlight bool) {
	if err := ctx.Err(); err != nil { // nothing sent: nothing to follow
		return nil, err, false
	}
	w.mu.Lock()
	score := w.score
	w.mu.Unlock()
	seq, sent := g.stamp()
	r, err, left := transport.Await(ctx, g.c.work, w.o.nodeTimeoutFor(1),
		func(ctx context.Context) (joinReply, error) { return g.n.join(ctx, g.nm, w, g.id, seq, score) },
		func(joinReply, error) { g.departing.Add(-1); g.leave(w.id, w.token, 0) })
	noteStep(w.o.note, err, left)
	switch {
	case left:
		g.departing.Add(1)
		return nil, g.n.Unanswered("wait", err), true
	case err != nil:
		return nil, err, false
	case r.granted && !time.Now().Before(validUntil(sent, r.px)):
		// Granted, but answered after the lease it gives was over: not a
		// lock (as in judge). Joining again confirms it with a fresh lease,
		// or leave.lua passes it on if the caller gives up.
		return nil, errGrantLapsed, false
	case r.granted:
		return newLock(g.c, g.nm, w.token, r.fence, w.o, sent, r.px), nil, false
	}
	w.mu.Lock()
	w.joined = true
	if w.score == "0" {
		w.score = r.score
	}
	w.mu.Unlock()
	g.mu.Lock()
	g.failing = nil // the node answered: an earlier keepalive's failure is over
	g.mu.Unlock()
	w.out.last = nil // the same for the outage w rode out (its own goroutine's)
	return nil, nil, false
}

// errGrantLapsed: a grant's lease ended before its answer came; rejoin.
var errGrantLapsed = errors.New("the grant's lease was over when its answer came")

// accept turns a grant delivered to w into its Lock, or returns nil when w
// must join again first: the grant is a claim shorter than w's TTL (the
// join gives the whole TTL Lock was asked for), less than a quarter of a
// claim is left, or its step is no longer known.
func (g *waitGroup) accept(w *queuedWaiter, h *handedOff) *Lock {
	if h.px < w.o.ttl {
		return nil
	}
	from, ok := g.sentAt(h.seq)
	if !ok || time.Until(validUntil(from, h.lease)) < w.px/4 {
		return nil
	}
	return newLock(g.c, g.nm, w.token, h.fence, w.o, from, h.lease)
}

// leaveWait is how long a waiter that gives up waits for its leave's answer
// before Lock returns: enough for a server that answers, so that a release
// right after finds the queue without it, short enough on a stalled server.
// A leave still running finishes in work Close waits for; until it lands,
// the group passes on a grant to the departed waiter (retire).
const leaveWait = 50 * time.Millisecond

// exit takes w out of the group; leave says whether its leave must be sent
// now (it has not been granted, and no step of its is in flight).
func (g *waitGroup) exit(w *queuedWaiter, leave bool) {
	g.mu.Lock()
	delete(g.waiters, w.id)
	if leave {
		g.departed[w.id] = w.token
	}
	g.mu.Unlock()
	if leave {
		wait := leaveWait
		if w.o.hasNodeTimeout {
			wait = min(wait, w.o.nodeTimeout)
		}
		// Also while Close runs: Close waits for this call (waitQueued),
		// and a leave still in flight then is work it waits for.
		g.leave(w.id, w.token, wait)
	}
	g.c.groups.lastLeft(g)
}

// leave sends the leave script for a departed waiter, which passes on a
// grant it got; it waits at most timeout (0: none), then lets it run on.
func (g *waitGroup) leave(id, token string, timeout time.Duration) {
	g.departing.Add(1) // until left
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err, left := transport.Await(ctx, g.c.work, timeout,
		func(ctx context.Context) (bool, error) { return g.n.leave(ctx, g.nm, token, id) },
		func(_ bool, err error) { g.left(id, token, err) })
	if !left {
		g.left(id, token, err)
	}
}

// left records the answer to a leave: a failed one is tried again.
func (g *waitGroup) left(id, token string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.departing.Add(-1)
	if err == nil {
		delete(g.departed, id)
		return
	}
	g.departed[id] = token
	g.c.warn("dlock: a waiter that gave up could not leave the queue; retrying while its Client waits for the key",
		slog.String("key", g.nm.key), slog.Any("err", err))
}

// departingLimit is how many departures a group has under way before new
// waiters wait, sending nothing (queuedWaiter.deferJoin): callers that give up
// faster than the server runs their joins and leaves would fill the queue
// with departed waiters, to whom every grant goes first.
const departingLimit = 64

// waiting reports whether the Client has waiters on key, or holds it
// through a grant to one of them; without groups it looks nothing up.
func (gs *groups) waiting(key string) bool {
	if gs.n.Load() == 0 {
		return false
	}
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g == nil {
		return false
	}
	g.mu.Lock()
	n := len(g.waiters)
	g.mu.Unlock()
	return n > 0
}

// lastLeft tells the group's keepalive that its last waiter has gone: the
// group stops groupLinger later unless a waiter comes meanwhile (retire).
func (gs *groups) lastLeft(g *waitGroup) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) > 0 || g.stopped {
		return
	}
	g.idle = time.Now()
	select {
	case g.emptied <- struct{}{}:
	default:
	}
}

// retire stops the group after groupLinger without waiters (claimTime while
// a departed waiter's leave is unconfirmed; out of the map: the next waiter
// starts anew), saying so; else how long it lingers, subscribed, no steps.
func (gs *groups) retire(g *waitGroup) (stopped bool, lingers time.Duration) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) > 0 || g.idle.IsZero() {
		return false, 0
	}
	linger := groupLinger
	if len(g.departed) > 0 {
		linger = claimTime // subscribed, it passes on grants to departed waiters
	}
	if left := linger - time.Since(g.idle); left > 0 {
		return false, left
	}
	g.stopped = true
	if gs.m[g.nm.key] == g {
		delete(gs.m, g.nm.key)
		gs.n.Store(int32(len(gs.m)))
	}
	return true, 0
}
