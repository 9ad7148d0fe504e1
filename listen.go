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

	"github.com/dlock-go/dlock/internal/transport"
)

// The listening wait: Lock with Redlock or WithReplicaAck, which do not
// queue (each node would order its waiters on its own). A waiter listens
// for the key's release messages and tries again; a Client's gate lets one
// of its waiters on a key at a time do so.

// gates keeps a Client's listening waiters (Redlock, WithReplicaAck) on one
// key from all trying at once: each key's gate lets one waiter at a time
// listen for releases and try, and the others wait in arrival order,
// without a word to Redis. A release then costs each Client one attempt,
// however many of its goroutines wait, and the Client's waiters are served
// in their order (across Clients, fairness stays best-effort).
type gates struct {
	mu     sync.Mutex
	m      map[string]*gate
	n      atomic.Int32    // len(m), read without mu (freed)
	trying map[string]bool // the keys with a first attempt under way (first)
}

// first reports whether a listening Lock call may make its first attempt on
// key: whether none of the Client's other Lock calls is making one, in
// which case this one's is under way until firstDone. If another is, this
// one goes to the gate without one: the two would find the key alike, and
// the second could only fail. So a herd that calls Lock at once makes about
// two attempts at first, not one each on every node, which queued the first
// holder's Unlock behind them (TestARedlockHerdWithTheDefaultsUnlocksCleanly).
// A call whose Client's waiters are already at the gate still makes its
// first attempt, which a release may let through at once.
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

// freed tells the turn at key's gate, if it was passed on by a waiter that
// obtained the lock (turn.held), that one of the Client's own holders of
// the key has released it or found it gone (Lock.gone). That turn waits
// for the holder's release without an attempt, so it cannot count on a
// release message: the release sends one only while someone's attempt
// has found the key taken in the last notifyWindow. Its own channel, not
// wake: a release message would wake the turn after into an attempt that
// could only fail. Any holder's release of the key closes it: at worst an
// attempt too early, which fails and listens.
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
// others, each woken by closing its channel when the turn passes to it.
//
// The gate also owns the key's release subscriptions, one per node, for as
// long as anyone waits at it: a release between two turns still reaches
// wake, and a turn needs no subscription of its own.
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

// turn is a waiter's turn at a key's gate: wake receives the key's release
// messages; held, if not nil, tells that the previous turn obtained the
// lock, which is then surely taken, and is closed once that holder has
// released it; until is when that holder's lease ends. leave passes the
// turn on.
type turn struct {
	gs      *gates
	key     string
	g       *gate
	held    <-chan struct{}
	until   time.Time
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
// turn only once a majority of nodes has announced it: Unlock releases the
// nodes in parallel, and an attempt made when the first of them answers
// would meet the others still held, fail, and have to give back what it
// got.
func newGate(key string, nodes []*node) *gate {
	g := &gate{wake: make(chan struct{}, 1), freed: make([]bool, len(nodes)), need: len(nodes)/2 + 1}
	for i, n := range nodes {
		w, ready := n.Watch(wakeChannel(key), func(payload string) {
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
	return waitFor(ctx, closed, t.wake, d)
}

// awaitHolder waits, for a turn that was passed on by a waiter that
// obtained the lock (held), until that holder has released it, its lease
// has ended, ctx ends or closed is closed. A release
// message is not waited for: one that comes now is the release before
// that holder's. A holder that has not released the lock when its lease
// ends (it renewed, or lost the lock, or still waits for its Unlock's
// answers) is tried then: the attempt listens, and the wait goes on
// with the release messages.
func (t *turn) awaitHolder(ctx context.Context, closed <-chan struct{}) {
	waitFor(ctx, closed, t.held, time.Until(t.until))
}

// waitFor waits until ch delivers (true), or d passes, ctx ends or closed
// is closed (false).
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

// leave passes the turn to the next waiter, telling it, if this one
// obtained the lock, when the lock's lease ends (until; zero: not
// obtained), or frees the gate and its subscriptions.
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

// notifyWindow is how long a failed attempt of a waiter that listens for
// release messages keeps the key's notify key alive. The release script
// publishes only while that key exists, so that a release nobody listens
// for costs no PUBLISH. A waiter attempts again at least every maxRetryWait,
// renewing it; if it lapsed anyway, the waiter's timer still retries.
const notifyWindow = 3 * maxRetryWait

// notifyMillis is notifyWindow as the acquire script takes it (boxed once).
var notifyMillis any = notifyWindow.Milliseconds()

// A listening wait (Redlock, WithReplicaAck) is woken by release messages,
// backed by a jittered timer (for expiries and lost messages) that starts at
// minRetryWait and doubles up to maxRetryWait, or fires just after the
// holder's TTL when that is sooner.
const (
	minRetryWait = 16 * time.Millisecond
	maxRetryWait = time.Second
)

// waitListening is Lock's wait with Redlock or WithReplicaAck, after a first
// attempt that failed with err (the holder's TTL pttl), or none (err nil:
// another Lock of this Client was making its first, gates.first): the
// waiter waits for a release message from any node, or a jittered timer,
// and tries again.
//
// Only one of a Client's waiters on a key at a time (the gate's turn)
// listens and tries; the others wait in the gate, in order, without a word
// to Redis, so a release wakes at most one waiter per Client. Lock's first
// attempt listens too: the notify key it sets has the release announced. A
// turn passed on by a waiter that obtained the lock (turn.held) learns of
// that holder's release from the Client (gates.freed), not from a message.
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

	// The gate's subscriptions were made before this turn's next attempt,
	// so that a release between that attempt and the wait below is not
	// missed. With several nodes, a majority's releases wake the waiter.
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

// awaitHeld waits, if turn came from a waiter that just obtained the
// lock, for that holder's release before the turn's first attempt: the
// lock is surely taken. That holder is of this Client, whose Unlock says
// so (gates.freed). It returns ErrClosed if the Client closed meanwhile.
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

// awaitRetry waits, in turn, for the next attempt after one that failed
// with err (the holder's TTL pttl): for a release message, or the retry
// timer from wait and pttl. It returns the next wait, doubled (to
// maxRetryWait) when the timer ran out, and why to stop instead of trying
// again: ctx's end, or ErrClosed.
func (c *Client) awaitRetry(ctx context.Context, turn *turn, err error, wait, pttl time.Duration) (time.Duration, error) {
	switch released := turn.await(ctx, c.done, retryDelay(wait, pttl)); {
	case !released:
		wait = min(2*wait, maxRetryWait)
	case errors.Is(err, errSplit):
		// Another Client's waiter woke with us last time and the
		// nodes were split between us: a random pause keeps us
		// from splitting them again.
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

// slowNodes says, once per Lock call, that the call is waiting for a
// majority of nodes to answer: a Lock without a deadline could otherwise
// wait for slow nodes in silence.
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

// confirmed waits until every ready is closed, for at most d or until ctx
// ends, and reports whether they all were.
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
// ErrClosed): it matches ErrNotObtained and cause, and, when the last attempt
// failed for want of a majority of nodes or because a node could not be
// reached, rather than because the lock was taken, that attempt's
// *QuorumError or *NodeError too.
func gaveUp(cause, last error) error {
	if errors.Is(last, ErrNoQuorum) || transient(last) {
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, cause, last)
	}
	return notObtained(cause)
}

// retryDelay returns how long a waiter sleeps when no notification comes:
// a jittered wait in [wait/2, wait), or just past the holder's remaining TTL
// when that is sooner (a lock that expires publishes nothing).
func retryDelay(wait, holderTTL time.Duration) time.Duration {
	if holderTTL > 0 && holderTTL < wait/2 {
		return holderTTL + rand.N(wait/8+1)
	}
	return wait/2 + rand.N(wait/2+1)
}
