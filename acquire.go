package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// With Redlock, waiting (Lock) is driven by release notifications; these
// bound the jittered timer that backs them up (for locks that expire instead
// of being released, and for lost notifications). The timer starts at
// minRetryWait and doubles up to maxRetryWait, and fires just after the
// holder's TTL runs out when that comes sooner. (One node: queue.go.)
const (
	minRetryWait = 16 * time.Millisecond
	maxRetryWait = time.Second
)

// TryLock makes one attempt to obtain the lock on key. It returns an error
// matching ErrNotObtained when someone else holds the lock (or ctx ends
// first, in which case the error also matches ctx.Err()), and a *NodeError
// when Redis could not be asked. Locks are not reentrant: TryLock on a key
// this process already holds fails like any other attempt.
//
// The attempt is one round trip: a script that sets key to a fresh random
// token with SET NX PX and issues the fencing token. If ctx ends before the
// answer and the server grants the lock anyway, the lock is released in the
// background.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	needContext(ctx)
	h := c.hooks.Load()
	start := h.acquireStart()
	o, err := c.prepare(key, opts)
	if err != nil {
		c.observeAcquire(h, key, o.primitiveFor(h), start, nil, false, err, nil, nil)
		return nil, err
	}
	o.note = newAcquireNote(h)
	sctx, end := h.startSpan(ctx, SpanAcquire, key, o.primitiveFor(h))
	l, _, err := c.try(sctx, key, o, false)
	c.observeAcquire(h, key, o.primitiveFor(h), start, l, false, err, o.note, end)
	c.startHold(h, ctx, l)
	return l, err
}

// Lock obtains the lock on key, waiting as long as it takes or until ctx
// ends. When ctx ends first, the error matches both ErrNotObtained and
// ctx.Err(); when the Client is closed, both ErrNotObtained and ErrClosed.
// A node that cannot be reached or cannot serve yet (a restart, a
// failover, a network cut: see outage.go) does not end the wait: Lock
// keeps its place in line and tries again with backoff until ctx ends,
// and the error of a wait that ended during such an outage also carries
// the last *NodeError (or *QuorumError). Errors no waiting can fix
// (NOPERM, WRONGTYPE, bad input) end it at once, as does any node error
// with WithFailFast.
//
// Waiting costs no polling and no connection per waiter. On one node the
// waiter joins a FIFO queue kept in Redis, and the holder's release hands it
// the lock directly, in arrival order, through the Client's one
// subscription connection (queue.go); a waiter that gives up leaves the
// line before Lock returns, and one whose process died is skipped within
// about a second. With Redlock (or WithReplicaAck), one waiter per Client
// and key at a time listens for the key's release notifications and tries
// again when one arrives, or, as a fallback, when the holder's TTL has run
// out or a jittered timer fires; the Client's other waiters on that key
// wait their turn behind it. There, fairness is best-effort.
//
// A Lock whose context has no deadline waits as long as it takes: bound it
// with context.WithTimeout for a bounded wait (other libraries' "retry N
// times"). WithNodeTimeout bounds each call to Redis, on one node too.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (l *Lock, err error) {
	needContext(ctx)
	contended := false
	var (
		o     options
		end   func(Event)
		outer = ctx
		h     = c.hooks.Load()
		start = h.acquireStart()
	)
	defer func() {
		if l != nil && contended {
			l.waited.Store(true)
		}
		c.observeAcquire(h, key, o.primitiveFor(h), start, l, contended, err, o.note, end)
		c.startHold(h, outer, l)
	}()
	o, err = c.prepare(key, opts)
	if errors.Is(err, ErrClosed) {
		return nil, notObtained(err) // as for a wait that Close ends
	}
	if err != nil {
		return nil, err
	}
	o.note = newAcquireNote(h)
	ctx, end = h.startSpan(ctx, SpanAcquire, key, o.primitiveFor(h))
	return c.lock(ctx, key, o, &contended)
}

// lock is Lock past its checks: a first attempt, unless others of this
// Client make it pointless, and the wait. contended is set when the lock
// was, or likely is, taken.
func (c *Client) lock(ctx context.Context, key string, o options, contended *bool) (*Lock, error) {
	listens := len(c.nodes) > 1 || o.replicas > 0 // Redlock and WithReplicaAck do not queue: they listen for releases
	switch {
	case !listens && c.groups.waiting(key):
		// Others of this Client wait for the key, or one holds it
		// through the line: the lock is likely taken, and the join takes
		// it if it is free and nobody is ahead, so a first attempt would
		// be one round trip too many.
		*contended = true
		return c.waitQueued(ctx, c.names.get(key), o)
	case listens && !c.gates.first(key):
		// Another Lock of this Client is making its first attempt on
		// the key: to the gate, without one (gates.first).
		*contended = true
		return c.waitListening(ctx, key, o, 0, nil, contended)
	}
	l, pttl, err := c.tryFirst(ctx, key, o, listens)
	if err == nil || !c.mayWait(ctx, o, err) {
		return l, err
	}
	*contended = isContended(ctx, err)
	if !listens {
		return c.waitQueued(ctx, c.names.get(key), o)
	}
	return c.waitListening(ctx, key, o, pttl, err, contended)
}

// tryFirst is Lock's first attempt; a listening one
// (waitListening) is under way for gates.first until it returns.
func (c *Client) tryFirst(ctx context.Context, key string, o options, listens bool) (*Lock, time.Duration, error) {
	if listens {
		defer c.gates.firstDone(key)
	}
	return c.try(ctx, key, o, listens)
}

// leaseEnd is when l's lease ends; zero for no lock.
func leaseEnd(l *Lock) time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.lease.validUntil()
}

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

// pause waits d, or until ctx ends or closed is closed.
func pause(ctx context.Context, closed <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-closed:
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

// Do runs fn while holding the lock on key: it waits for the lock like Lock
// (bounded by ctx), renews it automatically (WithAutoRenew is implied), runs
// fn, and unlocks, also when fn panics (the panic then continues). A nil
// fn is ErrInvalidArgument, refused before anything is locked.
//
// fn's context ends when ctx ends or when the lock's Context does (released,
// lost, lease expired, or the WithMaxHold ceiling); its deadline is the
// earlier of the two. fn should stop when it ends.
//
// Do returns fn's error. If the lock was lost while fn ran, or the final
// Unlock found it gone, the error also matches ErrLost and the specific
// cause: ErrKeyLost (a renewal or the final Unlock found the key no longer
// holding the token), ErrLeaseExpired or ErrMaxHold. A failed final Unlock
// (a *NodeError) is joined in too: the lock then stays held until its TTL
// runs out.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...Option) (err error) {
	if fn == nil {
		return invalid("Do with a nil function for %q: nothing to run under the lock", key)
	}
	l, err := c.Lock(ctx, key, append(opts[:len(opts):len(opts)], WithAutoRenew())...)
	if err != nil {
		return err
	}
	lockCtx := l.Context()
	fnCtx, cancel := context.WithCancelCause(l.holdContext(ctx))
	stop := context.AfterFunc(lockCtx, func() { cancel(context.Cause(lockCtx)) })
	defer func() {
		// Runs on return and on panic alike.
		stop()
		cancel(nil)
		var lost error
		if cause := context.Cause(lockCtx); errors.Is(cause, ErrLost) {
			lost = cause
		}
		uctx, done := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer done()
		switch uerr := l.Unlock(uctx); {
		case uerr == nil:
		case errors.Is(uerr, ErrNotHeld):
			if lost == nil {
				lost = fmt.Errorf("%w: %w", ErrKeyLost, uerr)
			}
		default:
			err = errors.Join(err, uerr)
		}
		if lost != nil && !errors.Is(err, lost) {
			err = errors.Join(err, lost)
		}
	}()
	return fn(doContext{leaseBound{fnCtx, &l.lease, cancel}})
}

// doContext is fn's context in Do: the caller's context, ended also by the
// lease (on the clock, as a Lock's Context is: leaseBound), with the
// earlier of the two deadlines.
type doContext struct{ leaseBound }

// Deadline is the earlier of the caller's deadline and the lease's.
func (c doContext) Deadline() (time.Time, bool) {
	lease := c.ls.validUntil()
	if d, ok := c.Context.Deadline(); ok && d.Before(lease) {
		return d, true
	}
	return lease, true
}

// isContended reports whether err means "someone else holds it" (and
// waiting may help), as opposed to an ended context or a failure.
func isContended(ctx context.Context, err error) bool {
	return errors.Is(err, ErrNotObtained) && ctx.Err() == nil
}

// mayWait reports whether Lock should wait and try again after err: someone
// else holds the lock, the node cannot be reached for now (transient; not
// with WithFailFast), or (Redlock) no majority answered but one still can.
// Nodes that were only slow (no answer within the node timeout) may answer
// next time, as may the nodes that said "taken"; nodes that failed outright
// (refused the connection, answered with an error) are counted as down, and
// once more than a minority is down no majority is possible: Lock then
// returns the *QuorumError at once (with WithFailFast, or when a node's
// error is not one that waiting can fix).
func (c *Client) mayWait(ctx context.Context, o options, err error) bool {
	if isContended(ctx, err) || !o.failFast && ctx.Err() == nil && transient(err) {
		return true
	}
	var qe *QuorumError
	if ctx.Err() != nil || !errors.As(err, &qe) {
		return false
	}
	var down transport.Votes // a node that failed outright is a no to "can a majority still answer?"
	for _, e := range qe.Errs {
		if !isSlow(e) {
			down.No++
		}
	}
	return down.Of(len(c.nodes)) != transport.Refused
}

// neverSent reports whether err shows that the command never reached the
// server (no connection could be had), so that it cannot have granted
// anything and there is nothing to give back. A connection whose setup the
// server refused (a wrong password, a database number it does not have)
// never sent the command either, and NOAUTH refuses a command unrun.
func neverSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, errUnsent) ||
		redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOAUTH") ||
		redis.HasErrorPrefix(err, "DB index is out of range")
}

// isSlow reports whether a node's error only says that it did not answer
// in time: the node timeout, the go-redis client's own read timeout, or an
// acquire not sent because the node had not answered the Client's release
// of the key within the node timeout (errUnsent: whether a stalled node's
// error is that or the node timeout is a race between two timers).
func isSlow(err error) bool {
	var ne net.Error
	return errors.Is(err, transport.ErrNodeTimeout) || errors.Is(err, errUnsent) || errors.As(err, &ne) && ne.Timeout()
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

// prepare checks a call's input and fills in its options.
func (c *Client) prepare(key string, opts []Option) (options, error) {
	if err := c.usable(); err != nil {
		return options{}, err
	}
	if err := keyspace.Check(key); err != nil {
		return options{}, err
	}
	o, err := newOptions(opts)
	if err != nil {
		return o, err
	}
	for _, n := range c.nodes {
		if o.replicas > 0 && o.replicaTimeout > n.BlockLimit {
			return o, invalid("replica acknowledgement timeout %v: the go-redis client's read timeout allows at most %v", o.replicaTimeout, n.BlockLimit)
		}
	}
	return o, nil
}
