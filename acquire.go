package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// TryLock makes one attempt to obtain the lock on key, in one round trip.
// It returns an error matching ErrNotObtained when someone else holds the
// lock (or ctx ends first: the error also matches ctx.Err()), and a
// *NodeError when Redis could not be asked (with Redlock, a *QuorumError
// listing each node's). Locks are not reentrant. A
// grant that comes after ctx ended is released in the background.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	needContext(ctx)
	h := c.hooks.Load()
	start := h.acquireStart()
	o, err := c.prepare(key, opts)
	if err != nil {
		c.observeAcquire(h, key, o, start, nil, false, err, nil, nil)
		return nil, err
	}
	o.note = newAcquireNote(h)
	sctx, end := h.startSpan(ctx, SpanAcquire, key, o.primitive())
	l, _, err := c.try(sctx, key, o, false)
	c.observeAcquire(h, key, o, start, l, false, err, o.note, end)
	c.startHold(h, ctx, l)
	c.recordOwner(ctx, l, o)
	return l, err
}

// Lock obtains the lock on key, waiting as long as it takes, until ctx ends
// (an error matching ErrNotObtained and ctx.Err()) or the Client closes
// (ErrNotObtained and ErrClosed). A node that cannot be reached or serve
// yet (a restart, a failover) does not end the wait: Lock keeps its place
// and retries with backoff, and its error at ctx's end also carries the
// last *NodeError (or *QuorumError). Errors no waiting can fix (NOPERM,
// WRONGTYPE, bad input) end it at once, as does any with WithFailFast.
//
// On one node waiters queue in Redis in arrival order (WithReplicaAck's
// too); with Redlock they are woken by release messages, and fairness is
// best-effort (docs/waiting.md). Bound the wait with ctx.
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
		c.observeAcquire(h, key, o, start, l, contended, err, o.note, end)
		c.startHold(h, outer, l)
		c.recordOwner(outer, l, o)
	}()
	o, err = c.prepare(key, opts)
	if errors.Is(err, ErrClosed) {
		return nil, notObtained(err) // as for a wait that Close ends
	}
	if err != nil {
		return nil, err
	}
	o.note = newAcquireNote(h)
	ctx, end = h.startSpan(ctx, SpanAcquire, key, o.primitive())
	return c.lock(ctx, key, o, &contended)
}

// lock is Lock past its checks: on one node the line (line_wait.go); with
// Redlock a first attempt, unless another of this Client's is under way,
// then the listening wait; contended: likely taken.
func (c *Client) lock(ctx context.Context, key string, o options, contended *bool) (*Lock, error) {
	if len(c.nodes) == 1 { // one node: the line (Redlock does not queue: it listens for releases)
		return c.waitInLine(ctx, namesOf(key), o, contended)
	}
	if !c.listens.first(key) {
		// Another Lock of this Client is making its first attempt: to the
		// gate without one (listens.first).
		*contended = true
		return c.waitListening(ctx, key, o, nil, contended)
	}
	l, err := c.tryFirst(ctx, key, o)
	if err == nil {
		return l, nil
	}
	if !c.mayWait(ctx, o, err) {
		return l, c.unwaited(ctx, o, err)
	}
	*contended = isContended(ctx, err)
	return c.waitListening(ctx, key, o, err, contended)
}

// tryFirst is Redlock's first attempt, under way for listens.first
// until it returns.
func (c *Client) tryFirst(ctx context.Context, key string, o options) (*Lock, error) {
	defer c.listens.firstDone(key)
	l, _, err := c.try(ctx, key, o, true)
	return l, err
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

// Do runs fn while holding the lock on key: it waits for the lock like Lock
// (bounded by ctx), renews it (WithAutoRenew is implied), runs fn, and
// unlocks, also when fn panics (the panic then continues). A nil fn is
// ErrInvalidArgument, refused before anything is locked. fn's context ends
// with ctx or the lock's Context (the earlier deadline): stop fn then.
//
// Do returns fn's error, joined with what ended the hold early: if the
// lease ended while fn ran, its cause (ErrKeyLost, ErrLeaseExpired or
// ErrMaxHold, each matching ErrLost); if it lasted and the final Unlock
// found the key gone, ErrKeyLost and Unlock's ErrNotHeld; if that Unlock
// failed, its *NodeError (the lock then stays until its TTL runs out).
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

// doContext is fn's context in Do: the caller's, ended also by the lease on
// the clock (leaseBound), with the earlier of the two deadlines.
type doContext struct{ leaseBound }

// Deadline is the earlier of the caller's deadline and the lease's.
func (c doContext) Deadline() (time.Time, bool) {
	lease := c.ls.validUntil()
	if d, ok := c.Context.Deadline(); ok && d.Before(lease) {
		return d, true
	}
	return lease, true
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
