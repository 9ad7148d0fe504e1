package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/transport"
)

// The listening wait: Lock with Redlock or WithReplicaAck, which do not
// queue (each node would order its waiters on its own).

// gates lets one of a Client's listening waiters on a key at a time listen
// for releases and try; the others wait in arrival order, without a word to
// Redis. A release costs each Client one attempt, and its waiters are
// served in order (across Clients, fairness stays best-effort).
type gates struct {
	mu     sync.Mutex
	m      map[string]*gate
	n      atomic.Int32    // len(m), read without mu (freed)
	trying map[string]bool // the keys with a first attempt under way (first)
}

// first reports whether a listening Lock call may make its first attempt on
// key: no other call of the Client's is making one (until firstDone). Else
// it goes to the gate without one, which would find the key alike and fail:
// a herd's attempts queued the first holder's Unlock behind them
// (TestARedlockHerdWithTheDefaultsUnlocksCleanly). Waiters already at the
// gate do not stop it: a release may let it through at once.
func (gs *gates) first(key string) (only bool) {
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

// firstDone ends the first attempt on key that first let through.
func (gs *gates) firstDone(key string) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	delete(gs.trying, key)
}

// freed tells the turn at key's gate, if passed on by a waiter that
// obtained the lock (turn.held), that a holder of the Client's released the
// key or found it gone (Lock.gone). That turn cannot count on a release
// message (sent only while a failed attempt listens), and a message would
// wake the turn after it into an attempt bound to fail. Any holder's
// release closes it: at worst an early attempt, which fails and listens.
func (gs *gates) freed(key string) {
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
// others, each woken by closing its channel. It owns the key's release
// subscriptions, one per node, while anyone waits at it, so a release
// between two turns still reaches wake.
type gate struct {
	busy    bool
	queue   []chan struct{}
	held    chan struct{}      // not nil: the turn was passed on by a waiter that obtained the lock; closed once it is released (freed)
	until   time.Time          // with held: when that holder's lease ends, if it has not released the lock by then
	wake    chan struct{}      // a majority of nodes announced a release (one pending at most)
	watches []*transport.Watch // on every node
	readies []<-chan struct{}  // closed once each node confirmed its subscription

	mu    sync.Mutex
	freed []bool // the nodes that announced a release since the turn's last attempt
	need  int    // how many must have: a majority
}

// turn is a waiter's turn at a key's gate (see gate); leave passes it on.
type turn struct {
	gs      *gates
	key     string
	g       *gate
	held    <-chan struct{}
	until   time.Time
	wake    <-chan struct{}
	readies []<-chan struct{}
}

// enter waits for the turn at key's gate until ctx ends (its error) or
// closed is closed (ErrClosed); a new gate subscribes on every node.
func (gs *gates) enter(ctx context.Context, closed <-chan struct{}, key string, nodes []*node) (*turn, error) {
	gs.mu.Lock()
	g := gs.m[key]
	if g == nil {
		g = newGate(key, nodes)
		if gs.m == nil {
			gs.m = map[string]*gate{}
		}
		gs.m[key] = g
		gs.n.Add(1)
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
		t.held, t.until = g.held, g.until
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
	t.leave(time.Time{}) // the turn came as we gave up: pass it on
	return nil, err
}

// newGate subscribes to key's releases on every node. A release wakes the
// turn once a majority has announced it: Unlock releases the nodes in
// parallel, and an attempt at the first answer would meet the rest held.
func newGate(key string, nodes []*node) *gate {
	g := &gate{wake: make(chan struct{}, 1), freed: make([]bool, len(nodes)), need: len(nodes)/2 + 1}
	for i, n := range nodes {
		w, ready := n.Watch(keyspace.Wake(key), func(payload string) {
			if payload == "released" {
				g.released(i)
			}
		})
		g.watches = append(g.watches, w)
		g.readies = append(g.readies, ready)
	}
	return g
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

// await waits for a release (true), or d, ctx's end or closed (false).
func (t *turn) await(ctx context.Context, closed <-chan struct{}, d time.Duration) (released bool) {
	return waitFor(ctx, closed, t.wake, d)
}

// awaitHolder waits, for a turn passed on by a holder (held), until it
// released the lock, its lease ended, ctx ends or closed is closed. A
// release message now would be the release before that holder's. A holder
// still holding when its lease ends is tried then; the attempt listens.
func (t *turn) awaitHolder(ctx context.Context, closed <-chan struct{}) {
	waitFor(ctx, closed, t.held, time.Until(t.until))
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

// leave passes the turn on, with until, the lease's end if this one
// obtained the lock (else zero), or frees the gate and its subscriptions.
func (t *turn) leave(until time.Time) {
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

// notifyWindow is how long a listening waiter's failed attempt keeps the
// notify key alive; the release publishes only while it exists, so a
// release nobody listens for costs no PUBLISH. A waiter retries at least
// every maxRetryWait, renewing it; if it lapses, the timer still retries.
const notifyWindow = 3 * maxRetryWait

// notifyMillis is notifyWindow as the acquire script takes it (boxed once).
var notifyMillis any = notifyWindow.Milliseconds()

// A listening wait is woken by release messages, backed by a jittered timer
// (for expiries and lost messages) doubling from minRetryWait to
// maxRetryWait, or firing just after the holder's TTL when sooner.
const (
	minRetryWait = 16 * time.Millisecond
	maxRetryWait = time.Second
)

// waitListening is Lock's wait with Redlock or WithReplicaAck, after a
// first attempt that failed with err (the holder's TTL pttl), or none (err
// nil: gates.first): at its gate's turn, it waits for a release message or
// a jittered timer, and tries again.
func (c *Client) waitListening(ctx context.Context, key string, o options, pttl time.Duration, err error, contended *bool) (*Lock, error) {
	last := err // the last attempt's error
	slow := slowNodes{c: c, key: key}
	slow.note(err)
	turn, err := c.gates.enter(ctx, c.done, key, c.nodes)
	if err != nil {
		return nil, gaveUp(err, last)
	}
	var l *Lock
	defer func() { turn.leave(leaseEnd(l)) }()

	// The gate subscribed before this turn's next attempt, so a release
	// between that attempt and the wait below is not missed.
	wait := minRetryWait
	confirmed(ctx, turn.readies, wait) // past this, the retry timer covers
	if err := c.awaitHeld(ctx, turn); err != nil {
		return nil, gaveUp(err, last)
	}
	for {
		turn.attempting()
		l, pttl, err = c.try(ctx, key, o, true)
		switch {
		case err == nil:
			return l, nil
		case ctx.Err() != nil:
			return nil, gaveUp(ctx.Err(), last)
		case !c.mayWait(ctx, o, err):
			return nil, err
		}
		*contended = *contended || isContended(ctx, err)
		slow.note(err)
		last = err
		var stop error
		if wait, stop = c.awaitRetry(ctx, turn, err, wait, pttl); stop != nil {
			return nil, gaveUp(stop, last)
		}
	}
}

// awaitHeld waits for the holder a turn came from (awaitHolder) before its
// first attempt; ErrClosed if the Client closed meanwhile.
func (c *Client) awaitHeld(ctx context.Context, turn *turn) error {
	if turn.held == nil {
		return nil
	}
	turn.awaitHolder(ctx, c.done)
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// awaitRetry waits, in turn, for a release message or the retry timer
// (wait, pttl) after an attempt that failed with err. It returns the next
// wait, doubled to maxRetryWait when the timer ran out, and why to stop:
// ctx's end, or ErrClosed.
func (c *Client) awaitRetry(ctx context.Context, turn *turn, err error, wait, pttl time.Duration) (time.Duration, error) {
	switch released := turn.await(ctx, c.done, retryDelay(wait, pttl)); {
	case !released:
		wait = min(2*wait, maxRetryWait)
	case errors.Is(err, errSplit):
		// Another Client's waiter split the nodes with us: a random pause
		// keeps us from splitting them again.
		pause(ctx, c.done, rand.N(minRetryWait))
	}
	switch {
	case ctx.Err() != nil:
		return wait, ctx.Err()
	case c.closed.Load():
		return wait, ErrClosed
	}
	return wait, nil
}

// slowNodes warns, once per Lock call, that it waits for a majority of
// nodes to answer: a Lock without a deadline would otherwise wait silently.
type slowNodes struct {
	c      *Client
	key    string
	warned bool
}

func (s *slowNodes) note(err error) {
	if !s.warned && errors.Is(err, ErrNoQuorum) {
		s.warned = true
		s.c.warn("dlock: Lock is waiting for a majority of nodes to answer",
			slog.String("key", s.key), slog.Any("err", err))
	}
}

// confirmed reports whether every ready closed within d, while ctx lasted.
func confirmed(ctx context.Context, readies []<-chan struct{}, d time.Duration) bool {
	if len(readies) == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ready := range readies {
		select {
		case <-ready:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// errSplit marks a Redlock attempt that some nodes granted while a
// majority was taken: another waiter tried at the same moment.
var (
	errSplit            = errors.New("the nodes were split between waiters")
	errNotObtainedSplit = fmt.Errorf("%w (%w)", ErrNotObtained, errSplit)
)

// gaveUp is Lock's error when it stops waiting for cause (an ended context,
// ErrClosed): it matches ErrNotObtained and cause, and, when the last
// attempt failed for want of a majority or a reachable node, rather than
// contention, that attempt's *QuorumError or *NodeError too.
func gaveUp(cause, last error) error {
	if errors.Is(last, ErrNoQuorum) || transient(last) {
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, cause, last)
	}
	return notObtained(cause)
}

// retryDelay returns a jittered wait in [wait/2, wait), or just past the
// holder's TTL if sooner (a lock that expires publishes nothing).
func retryDelay(wait, holderTTL time.Duration) time.Duration {
	if holderTTL > 0 && holderTTL < wait/2 {
		return holderTTL + rand.N(wait/8+1)
	}
	return wait/2 + rand.N(wait/2+1)
}
