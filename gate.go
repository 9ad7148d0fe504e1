package dlock

import (
	"context"
	"slices"
	"sync"
	"time"
)

// gates keeps a Client's notified waiters (Redlock, WithReplicaAck) on one
// key from all trying at once: each key's gate lets one waiter at a time
// listen for releases and try, and the others wait in arrival order,
// without a word to Redis. A release then costs each Client one attempt,
// however many of its goroutines wait, and the Client's waiters are served
// in their order (across Clients, fairness stays best-effort).
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

// gate is one key's: busy while a waiter has the turn; queue holds the
// others, each woken by closing its channel when the turn passes to it.
//
// The gate also owns the key's release subscriptions, one per node, for as
// long as anyone waits at it: a release between two turns still reaches
// wake, and a turn needs no subscription of its own.
type gate struct {
	busy    bool
	queue   []chan struct{}
	held    bool              // the turn was passed on by a waiter that obtained the lock
	wake    chan struct{}     // a majority of nodes announced a release (one pending at most)
	watches []*watch          // on every node
	readies []<-chan struct{} // closed once each node confirmed its subscription

	mu    sync.Mutex
	freed []bool // the nodes that announced a release since the turn's last attempt
	need  int    // how many must have: a majority
}

// turn is a waiter's turn at a key's gate: wake receives the key's release
// messages; held tells that the previous turn obtained the lock, which is
// then surely taken. leave passes the turn on.
type turn struct {
	gs      *gates
	key     string
	g       *gate
	held    bool
	wake    <-chan struct{}
	readies []<-chan struct{}
}

// enter waits for the turn at key's gate, until ctx ends (its error) or
// closed is closed (ErrClosed). A new gate subscribes to key's releases on
// every node.
func (gs *gates) enter(ctx context.Context, closed <-chan struct{}, key string, nodes []*node) (*turn, error) {
	gs.mu.Lock()
	g := gs.m[key]
	if g == nil {
		g = newGate(key, nodes)
		if gs.m == nil {
			gs.m = map[string]*gate{}
		}
		gs.m[key] = g
	}
	t := &turn{gs: gs, key: key, g: g, wake: g.wake, readies: g.readies}
	if !g.busy {
		g.busy = true
		gs.mu.Unlock()
		return t, nil
	}
	mine := make(chan struct{})
	g.queue = append(g.queue, mine)
	gs.mu.Unlock()
	var err error
	select {
	case <-mine:
		gs.mu.Lock()
		t.held = g.held
		gs.mu.Unlock()
		return t, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	if i := slices.Index(g.queue, mine); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		gs.mu.Unlock()
		return nil, err
	}
	gs.mu.Unlock()
	t.leave(false) // the turn came as we gave up: pass it on
	return nil, err
}

// newGate subscribes to key's releases on every node. A release wakes the
// turn only once a majority of nodes has announced it: Unlock releases the
// nodes in parallel, and an attempt made when the first of them answers
// would meet the others still held, fail, and have to give back what it
// got.
func newGate(key string, nodes []*node) *gate {
	g := &gate{wake: make(chan struct{}, 1), freed: make([]bool, len(nodes)), need: len(nodes)/2 + 1}
	for i, n := range nodes {
		w, ready := n.sub.watch(wakeChannel(key), func(payload string) {
			if payload == "released" {
				g.released(i)
			}
		})
		g.watches = append(g.watches, w)
		g.readies = append(g.readies, ready)
	}
	return g
}

// released records node i's release message, and wakes the turn once a
// majority has sent one.
func (g *gate) released(i int) {
	g.mu.Lock()
	g.freed[i] = true
	n := 0
	for _, f := range g.freed {
		if f {
			n++
		}
	}
	g.mu.Unlock()
	if n >= g.need {
		select {
		case g.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// attempting forgets the release messages seen so far: the turn is about
// to try, and only releases from now on mean the lock may be free again.
func (t *turn) attempting() {
	g := t.g
	g.mu.Lock()
	clear(g.freed)
	g.mu.Unlock()
	select {
	case <-g.wake:
	default:
	}
}

// await waits until a release wakes the turn (true), or d passes, ctx
// ends or closed is closed (false).
func (t *turn) await(ctx context.Context, closed <-chan struct{}, d time.Duration) (released bool) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-t.wake:
		return true
	case <-tm.C:
	case <-ctx.Done():
	case <-closed:
	}
	return false
}

// leave passes the turn to the next waiter, telling it whether this one
// obtained the lock, or frees the gate and its subscriptions.
func (t *turn) leave(obtained bool) {
	gs := t.gs
	gs.mu.Lock()
	g := t.g
	if len(g.queue) == 0 {
		delete(gs.m, t.key)
		gs.mu.Unlock()
		for _, w := range g.watches {
			w.cancel()
		}
		return
	}
	defer gs.mu.Unlock()
	g.held = obtained
	next := g.queue[0]
	g.queue = g.queue[1:]
	close(next)
}
