package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
)

// Lock is one acquisition of a lock: the key, the random token stored at it,
// the fencing token issued with it, and the lease (see Context). It is safe
// for concurrent use; every change is checked on the server against the
// token, so a Lock never releases or extends a lock someone else holds.
type Lock struct {
	c        *Client
	names    *lockNames // the key and the names derived from it
	token    string
	fence    int64
	raise    int64                  // what a release raises each node's fencing counter to: the fence, or 0 on one node
	ttl      time.Duration          // the lease asked for at acquire, and by renewals
	keep     time.Duration          // how long the fencing counter is kept from a grant (fence.go)
	timeout  time.Duration          // per-node timeout (0: none)
	acquired time.Time              // when the acquire request was sent
	valid    time.Duration          // how long the key lived from then (a hand-off counts from an earlier step)
	lease    lease                  // a field, not a pointer: one allocation less per lock
	pending  *quorum.Pending[*node] // nodes whose acquire had not answered when it was obtained (quorum.Pending)
	waited   atomic.Bool            // obtained after waiting: others likely wait too (node.release's lean)

	stopped chan struct{} // closed when the watchdog has returned; nil without one

	renewed  atomic.Bool  // a renewal or Extend has begun
	extended atomic.Int64 // the TTL the last Extend asked for (ns); 0 before any

	mu           sync.Mutex
	halted       bool                 // Unlock or giveBack has begun: the watchdog stops (halt)
	stop         chan struct{}        // closed once halted
	renewing     chan struct{}        // a one-slot semaphore: one renewal at a time
	released     bool                 // Unlock succeeded, or found the lock gone
	afterRelease func()               // run once Unlock has released the lock (elections announce it)
	hold         atomic.Pointer[hold] // the hold span, when traced (trace.go)
	lossOnce     sync.Once            // the loss is reported once (lost)
	owner        string               // the owner record kept beside the hold (WithOwner), or ""
}

// errNoRoom: the hold ceiling leaves less than MinTTL to renew for.
var errNoRoom = fmt.Errorf("%w: no room left to extend", ErrMaxHold)

// newLock returns the Lock of a grant sent at sent, its key living valid.
func newLock(c *Client, nm *lockNames, token string, fence int64, o options, sent time.Time, valid time.Duration) *Lock {
	l := &Lock{token: token, stop: make(chan struct{}), renewing: make(chan struct{}, 1)}
	l.c, l.names, l.fence, l.ttl, l.keep = c, nm, fence, o.ttl, o.fenceKeep()
	l.acquired, l.valid, l.timeout = sent, valid, o.nodeTimeoutFor(len(c.nodes))
	l.lease.init(sent, valid, o)
	if len(c.nodes) > 1 {
		// A Redlock fence is the nodes' maximum, which each node's counter
		// must reach on release (redlock.go); one node's has it already.
		l.raise = fence
	}
	c.watchLoss(l)
	c.checkEviction()
	if o.autoRenew {
		l.lease.watch() // the watchdog stops when the lease ends
		l.stopped = make(chan struct{})
		stop := l.stop
		c.spawn(func() {
			defer close(l.stopped)
			l.watchdog(stop)
		})
	}
	return l
}

// onRelease sets what runs once Unlock has released the lock.
func (l *Lock) onRelease(fn func()) {
	l.mu.Lock()
	l.afterRelease = fn
	l.mu.Unlock()
}

// halt marks the lock as being released or given back: its watchdog stops.
func (l *Lock) halt() {
	l.mu.Lock()
	if !l.halted {
		close(l.stop)
	}
	l.halted = true
	l.mu.Unlock()
}

// isHalted reports whether Unlock or giveBack has begun.
func (l *Lock) isHalted() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.halted
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.names.key }

// Token returns this acquisition's random owner token, stored at the key
// while held (160 random bits, URL-safe base64, then "-v1"). Treat it as a
// secret: whoever
// has it can release the lock.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token issued with this acquisition: strictly
// greater than every fence issued before it for the key. Have the resource
// refuse writes with a lower fence than it has seen (docs/fencing.md).
func (l *Lock) Fence() int64 { return l.fence }

// Context returns a context that ends when the lock is released, lost, or
// may have expired. Its deadline is the holder's conservative estimate of
// the lease (lease.go): when the acquire or last renewal was sent, plus the
// TTL, minus a drift margin, never past the WithMaxHold ceiling; it ends by
// then even if Redis stops answering. context.Cause says why: ErrReleased,
// or ErrKeyLost, ErrLeaseExpired or ErrMaxHold (all three match ErrLost).
//
// Run the protected work under it and stop when it ends. Its Err and Done
// look at the clock: from the deadline on it is done, though its timer may
// not have fired (late on a busy machine, never in a paused process). A
// context derived from it ends only when that timer fires: before a step
// that must not outlive the lease, ask this context, as the guards do.
func (l *Lock) Context() context.Context {
	return leaseContext{leaseBound{l.lease.watch().ctx, &l.lease, nil}}
}

// String describes the lock for logs without revealing its token.
func (l *Lock) String() string {
	return fmt.Sprintf("dlock.Lock{key=%q fence=%d token=%s}", l.Key(), l.fence, tokens.Redact(l.token))
}

// Unlock releases the lock if this Lock still holds it, stops its renewal,
// and ends its Context with cause ErrReleased. It returns an error matching
// ErrNotHeld when the key no longer holds this token (it expired; a new
// holder's key is left untouched, and the Context ends with ErrKeyLost), or
// when already unlocked. If ctx ends first, Unlock returns ctx's error; the
// release still completes in the background.
func (l *Lock) Unlock(ctx context.Context) (err error) {
	needContext(ctx)
	defer l.lost() // a loss found before or by this release is reported by now
	if l.isReleased() {
		return l.notHeld()
	}
	h := l.c.hooks.Load()
	ctx, end := l.startSpan(h, ctx, SpanRelease)
	if h != nil || l.traced() { // a hold ends even if the tracer has gone
		defer func() {
			e := l.event(EventRelease, err)
			e.Held = time.Since(l.acquired)
			h.report(e, end)
			if !l.lost() {
				l.endHold(e)
			}
		}()
	}
	l.pending.ReleaseAfter() // before the lock is marked asked: quorum.Pending
	l.halt()
	v := l.releaseAll(ctx)
	if l.stopped != nil {
		select { // the watchdog returns at once unless a renewal is in flight
		case <-l.stopped:
		case <-ctx.Done():
		}
	}
	if l.owner != "" { // after the watchdog, whose renewal would write it again
		l.c.cleanup(func(ctx context.Context) { l.keepOwner(ctx, "", 0) })
	}
	switch v.Of(len(l.c.nodes)) {
	case quorum.Agreed:
		return nil
	case quorum.Refused:
		return l.notHeld()
	default:
		return undecided(v, ctx.Err(), len(l.c.nodes))
	}
}

// releaseAll releases on every node, raising each counter to the fence
// (redlock.go). A quorum's answers decide; the rest finish in the background
// and still count, so a verdict they complete ends the Context.
func (l *Lock) releaseAll(ctx context.Context) quorum.Votes {
	if len(l.c.nodes) == 1 {
		r := round[bool]{Op: "release", Timeout: l.timeout, Call: l.releaseOn, Yes: isYes, Late: l.lateRelease}
		a := r.AskOne(ctx, l.c.work, l.c.nodes[0])
		if !a.Abandoned {
			l.lateRelease(nil, a.V, a.Err)
		}
		return count([]answer[bool]{a}, isYes)
	}
	// Recorded as under way before the round, so that an acquire of this
	// Client's after Unlock returns waits for them (quorum.Flights).
	rs := &releases{l: l, flights: make(map[*node]chan struct{}, len(l.c.nodes))}
	for _, n := range l.c.nodes {
		rs.flights[n] = n.releases.Start(l.names.key)
	}
	b := &quorum.Ballot{N: len(l.c.nodes)}
	settle := func(ok bool, err error) { // the first verdict, in time or late, ends the lease
		if vd, decided := b.Add(ok, err); decided {
			l.gone(vd == quorum.Agreed)
		}
	}
	answers := round[bool]{Op: "release", Timeout: l.timeout, Call: rs.on, Yes: isYes,
		Late: func(_ *node, ok bool, err error) { settle(ok, err) },
	}.Ask(ctx, l.c.work, l.c.nodes)
	for _, a := range answers {
		if !a.Abandoned {
			settle(a.Err == nil && a.V, a.Err)
		}
	}
	return count(answers, isYes)
}

// lateRelease settles a one-node release from its answer, in time or late:
// released or found gone ends the lease, as does an error that says the
// key is gone (errKeyGone); any other error decides nothing.
func (l *Lock) lateRelease(_ *node, ok bool, err error) {
	switch {
	case err == nil:
		l.gone(ok)
	case errors.Is(err, errKeyGone): // released by this Unlock, or expired: over either way
		l.gone(false)
	}
}

// releases is one Unlock's releases on several nodes (quorum.Flights).
type releases struct {
	l       *Lock
	flights map[*node]chan struct{}
}

// on releases on n, retrying one that may have been lost (retryRelease).
func (rs *releases) on(ctx context.Context, n *node) (bool, error) {
	defer n.releases.End(rs.l.names.key, rs.flights[n])
	ok, err := rs.l.releaseOn(ctx, n)
	if err != nil && !neverSent(err) {
		rs.l.retryRelease(n, err)
	}
	return ok, err
}

// retryRelease sends the release to n again, in the background, after
// cause, an error the release may not have run with (a read timeout,
// LOADING): else the key would block n until its TTL. As releaseUncertain
// does, it waits for go-redis to settle the request, then releases until
// n answers (releaseAnswered).
func (l *Lock) retryRelease(n *node, cause error) {
	l.c.spawn(func() {
		ctx, cancel := l.c.cleanupContext()
		answered := transport.Settled(ctx, cause)
		cancel()
		if !answered {
			l.c.releaseAnswered(n, l.names, l.token, l.raise, l.keep, true)
		}
	})
}

// releaseOn releases the lock on node n, once n's acquire has answered.
func (l *Lock) releaseOn(ctx context.Context, n *node) (bool, error) {
	if ch := l.pending.Arrival(n); ch != nil {
		<-ch // bounded: the acquire's request ends with go-redis's timeouts
	}
	return n.release(ctx, l.names, l.token, l.raise, l.keep, !l.waited.Load())
}

// event is an Event about l: its key, primitive, fence and node count.
func (l *Lock) event(kind EventKind, err error) Event {
	return Event{Kind: kind, Key: l.Key(), Primitive: tokens.Primitive(l.token), Mode: tokens.Mode(l.token), Fence: l.fence, Nodes: len(l.c.nodes), Err: err}
}

// gone records a release's answer: released (ok), or found gone.
func (l *Lock) gone(ok bool) {
	l.mu.Lock()
	l.released = true
	then := l.afterRelease
	l.mu.Unlock()
	l.c.listens.freed(l.names.key)
	if ok {
		l.lease.end(ErrReleased)
		if then != nil {
			then()
		}
	} else {
		l.lease.end(ErrKeyLost)
	}
}

// Extend resets the lock's time to live to ttl (MinTTL to MaxTTL), counted
// from when the server receives the request, if this Lock still holds it,
// and moves the Context's deadline to match. With WithMaxHold, the TTL is
// cut so the lock ends at the ceiling; past it, Extend fails with an error
// matching ErrMaxHold. If the key no longer holds this Lock's token, Extend
// returns an error matching ErrNotHeld, changes nothing (an expired lock is
// never re-created), and ends the Context with ErrKeyLost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	needContext(ctx)
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if l.isReleased() {
		return l.notHeld()
	}
	ttl = ttl.Truncate(time.Millisecond)
	l.extended.Store(int64(ttl))
	_, err := l.renew(ctx, ttl)
	return err
}

// renew extends the lease by ttl (cut at the hold ceiling), one renewal at a
// time, and returns when the successful request was sent. Once the lease is
// over nothing extends the key: someone else may have been told it is free.
func (l *Lock) renew(ctx context.Context, ttl time.Duration) (sent time.Time, err error) {
	h := l.c.hooks.Load()
	ctx, end := l.startSpan(h, ctx, SpanRenew)
	if h != nil {
		defer func() { h.report(l.event(EventRenew, err), end) }()
	}
	slot := l.renewing
	select {
	case slot <- struct{}{}:
		defer func() { <-slot }()
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	if l.lease.over() {
		return time.Time{}, l.overErr()
	}
	l.renewed.Store(true)
	sent = time.Now()
	ttl, cut, room := l.lease.renewalTTL(sent, ttl)
	if !room {
		return sent, errNoRoom
	}
	// Extended on a quorum is extended: the others are not waited for.
	answers := round[renewal]{Op: "extend", Timeout: l.timeout, Yes: extended,
		Call: func(ctx context.Context, n *node) (renewal, error) {
			return n.extend(ctx, l.names, l.token, ttl, ttl+l.keep-l.ttl)
		},
	}.Ask(ctx, l.c.work, l.c.nodes)
	if why := revokedBy(answers); why != "" {
		return sent, l.revoked(why)
	}
	return sent, l.renewalVerdict(ctx, count(answers, extended), sent, ttl, cut)
}

func extended(r renewal) bool { return r.Extended }

// renewalVerdict applies a renewal's verdict v to the lease.
func (l *Lock) renewalVerdict(ctx context.Context, v quorum.Votes, sent time.Time, ttl time.Duration, cut bool) error {
	switch v.Of(len(l.c.nodes)) {
	case quorum.Agreed:
		// Confirmed too late: someone else may have had the lock meanwhile.
		if !time.Now().Before(l.lease.validUntil()) {
			l.lease.over()
			l.giveBack()
			return fmt.Errorf("%w: %q", ErrLeaseExpired, l.Key())
		}
		l.lease.renewed(sent, ttl, cut)
		if l.owner != "" {
			l.keepOwner(ctx, l.owner, ttl)
		}
		return nil
	case quorum.Refused:
		// Unlock, under way, may have deleted the key: it says why.
		if !l.isHalted() {
			l.lease.end(ErrKeyLost)
		}
		return l.notHeld()
	}
	return undecided(v, ctx.Err(), len(l.c.nodes))
}

// TTL returns the lock's remaining time to live as the server sees it, or an
// error matching ErrNotHeld when the key no longer holds this Lock's token
// (the Context then ends with ErrKeyLost).
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	needContext(ctx)
	if l.isReleased() {
		return 0, l.notHeld()
	}
	answers := l.c.inspectAll(ctx, l.Key(), l.token, l.timeout, "ttl")
	v, d := holding(answers, l.token)
	switch v.Of(len(l.c.nodes)) {
	case quorum.Agreed:
		return d, nil
	case quorum.Refused:
		l.lease.end(ErrKeyLost)
		return 0, l.notHeld()
	}
	return 0, undecided(v, ctx.Err(), len(l.c.nodes))
}

// overErr is the error of a renewal asked for after the lease ended: not
// held, with the lease's cause unless it was released.
func (l *Lock) overErr() error {
	if cause := l.lease.ended(); !errors.Is(cause, ErrReleased) {
		return fmt.Errorf("%w: %q (%w)", ErrNotHeld, l.Key(), cause)
	}
	return l.notHeld()
}

// giveBack releases, in the background, a key held past the lease's end,
// until each node answers (releaseAnswered).
func (l *Lock) giveBack() {
	l.halt()
	for _, n := range l.c.nodes {
		l.c.spawn(func() { l.c.releaseAnswered(n, l.names, l.token, l.raise, l.keep, true) })
	}
}

func (l *Lock) notHeld() error {
	return fmt.Errorf("%w: %q", ErrNotHeld, l.Key())
}

// asked reports whether a renewal, Extend or Unlock has been sent for the
// lock since it was obtained; each marks it first (see lateGiveBack).
func (l *Lock) asked() bool {
	return l.renewed.Load() || l.isHalted()
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	return released
}
