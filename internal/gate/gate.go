// Package gate is the turnstile of dlock's listening wait (Redlock; one
// node's waiters queue in Redis instead): one of a Client's waiters on a
// key at a time listens for the key's releases and tries; the others wait
// in arrival order, without a word to Redis. A release costs each Client one attempt, and its waiters
// are served in order (across Clients, fairness stays best-effort).
//
// A gate subscribes to the key's wake channel (keyspace.Wake) on every node
// while anyone waits at it, so a release between two turns still wakes the
// next; the message it counts is "released", which the release scripts
// publish while someone listens. The package decides nothing about locks:
// the protocol (the root package's listen.go) tries, and says when.
package gate

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/transport"
)

// Watcher is a node's pub/sub (transport.Node has it): w.C receives each
// message on channel until the Watch is cancelled; ready closes once the
// node confirmed the subscription.
type Watcher interface {
	Watch(channel string) (w *transport.Watch, ready <-chan struct{})
}

// Gates is a Client's gates, one per key with waiters.
type Gates struct {
	nodes []Watcher

	mu     sync.Mutex
	m      map[string]*gate
	n      atomic.Int32    // len(m), read without mu (Freed)
	trying map[string]bool // the keys with a first attempt under way (First)
}

// New returns the gates of a Client of nodes.
func New(nodes []Watcher) *Gates { return &Gates{nodes: nodes} }

// First reports whether a listening Lock call may make its first attempt
// on key: no other call of the Client's is making one (until FirstDone).
// Else it goes to the gate without one, which would find the key alike and
// fail: a herd's attempts queued the first holder's Unlock behind them.
// Waiters already at the gate do not stop it: a release may let it through.
func (gs *Gates) First(key string) (only bool) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.trying[key] {
		return false
	}
	if gs.trying == nil {
		gs.trying = map[string]bool{}
	}
	gs.trying[key] = true
	return true
}

// FirstDone ends the first attempt on key that First let through.
func (gs *Gates) FirstDone(key string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	delete(gs.trying, key)
}

// Freed tells the turn at key's gate, if passed on by a waiter that
// obtained the lock (Turn.Leave with a lease's end), that a holder of the
// Client's released the key or found it gone. That turn cannot count on a
// release message (sent only while a failed attempt listens), and a
// message would wake the turn after it into an attempt bound to fail. Any
// holder's release opens it: at worst an early attempt, which fails and
// listens.
func (gs *Gates) Freed(key string) {
	if gs.n.Load() == 0 { // no gate: every Unlock of a Client without waiters
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m[key]; g != nil && g.held != nil {
		close(g.held)
		g.held = nil
	}
}

// gate is one key's: busy while a waiter has the turn; queue holds the
// others, each woken by closing its channel.
type gate struct {
	busy    bool
	queue   []chan struct{}
	held    chan struct{}      // not nil: the turn was passed on by a waiter that obtained the lock; closed once it is released (Freed)
	until   time.Time          // with held: when that holder's lease ends, if it has not released the lock by then
	wake    chan struct{}      // a majority of nodes announced a release (one pending at most)
	watches []*transport.Watch // on every node
	readies []<-chan struct{}  // closed once each node confirmed its subscription
	readers sync.WaitGroup     // one goroutine per watch, reading its messages

	mu    sync.Mutex
	freed []bool // the nodes that announced a release since the turn's last attempt
	need  int    // how many must have: a majority
}

// Turn is a waiter's turn at a key's gate; Leave passes it on.
type Turn struct {
	gs    *Gates
	key   string
	g     *gate
	held  <-chan struct{}
	until time.Time
}

// Enter waits for the turn at key's gate; ok is false when ctx ended or
// closed was closed first. A new gate subscribes on every node.
func (gs *Gates) Enter(ctx context.Context, closed <-chan struct{}, key string) (t *Turn, ok bool) {
	gs.mu.Lock()
	g := gs.m[key]
	if g == nil {
		g = newGate(key, gs.nodes)
		if gs.m == nil {
			gs.m = map[string]*gate{}
		}
		gs.m[key] = g
		gs.n.Add(1)
	}
	t = &Turn{gs: gs, key: key, g: g}
	if !g.busy {
		g.busy = true
		gs.mu.Unlock()
		return t, true
	}
	mine := make(chan struct{})
	g.queue = append(g.queue, mine)
	gs.mu.Unlock()
	select {
	case <-mine:
		gs.mu.Lock()
		t.held, t.until = g.held, g.until
		gs.mu.Unlock()
		return t, true
	case <-ctx.Done():
	case <-closed:
	}
	gs.mu.Lock()
	if i := slices.Index(g.queue, mine); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		gs.mu.Unlock()
		return nil, false
	}
	gs.mu.Unlock()
	t.Leave(time.Time{}) // the turn came as we gave up: pass it on
	return nil, false
}

// newGate subscribes to key's releases on every node. A release wakes the
// turn once a majority has announced it: Unlock releases the nodes in
// parallel, and an attempt at the first answer would meet the rest held.
func newGate(key string, nodes []Watcher) *gate {
	g := &gate{wake: make(chan struct{}, 1), freed: make([]bool, len(nodes)), need: quorum.Majority(len(nodes))}
	for i, n := range nodes {
		w, ready := n.Watch(keyspace.Wake(key))
		g.watches = append(g.watches, w)
		g.readies = append(g.readies, ready)
		g.readers.Add(1)
		go g.read(i, w)
	}
	return g
}

// read counts node i's release messages until w is cancelled (Leave) or
// its node stops watching.
func (g *gate) read(i int, w *transport.Watch) {
	defer g.readers.Done()
	for payload := range w.C {
		if payload == "released" {
			g.released(i)
		}
	}
}

// released records node i's release message; a majority's wakes the turn.
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

// Subscribed reports whether every node confirmed the gate's subscription
// within d, while ctx lasted. Past it, a release before the turn's next
// attempt is not missed; before it, the caller's retry timer covers.
func (t *Turn) Subscribed(ctx context.Context, d time.Duration) bool {
	return quorum.AwaitAll(ctx, t.g.readies, d)
}

// Attempting forgets the release messages seen so far: the turn is about
// to try, and only releases from now on mean the lock may be free again.
func (t *Turn) Attempting() {
	g := t.g
	g.mu.Lock()
	clear(g.freed)
	g.mu.Unlock()
	select {
	case <-g.wake:
	default:
	}
}

// Await waits for a release (true), or d, ctx's end or closed (false).
func (t *Turn) Await(ctx context.Context, closed <-chan struct{}, d time.Duration) (released bool) {
	return waitFor(ctx, closed, t.g.wake, d)
}

// AwaitHolder waits, for a turn passed on by a holder, until it released
// the lock, its lease ended, ctx ends or closed is closed; at once for any
// other turn. A release message now would be the release before that
// holder's. A holder still holding when its lease ends is tried then; the
// attempt listens.
func (t *Turn) AwaitHolder(ctx context.Context, closed <-chan struct{}) {
	if t.held != nil {
		waitFor(ctx, closed, t.held, time.Until(t.until))
	}
}

// waitFor waits for ch (true), or d, ctx's end or closed (false).
func waitFor(ctx context.Context, closed, ch <-chan struct{}, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ch:
		return true
	case <-tm.C:
	case <-ctx.Done():
	case <-closed:
	}
	return false
}

// Leave passes the turn on, with until, the lease's end if this one
// obtained the lock (else zero), or frees the gate and its subscriptions.
func (t *Turn) Leave(until time.Time) {
	gs := t.gs
	gs.mu.Lock()
	g := t.g
	if len(g.queue) == 0 {
		delete(gs.m, t.key)
		gs.n.Add(-1)
		gs.mu.Unlock()
		for _, w := range g.watches {
			w.Cancel()
		}
		g.readers.Wait()
		return
	}
	defer gs.mu.Unlock()
	g.held, g.until = nil, until
	if !until.IsZero() {
		g.held = make(chan struct{})
	}
	next := g.queue[0]
	g.queue = g.queue[1:]
	close(next)
}
