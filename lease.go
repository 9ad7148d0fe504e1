package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// The lease model
//
// A lock is a lease: Redis lets anyone else in once the key's TTL has run
// out, whether or not the holder is done. The holder cannot see the server's
// clock, so it keeps a conservative local estimate of when that can happen,
// on its own monotonic clock:
//
//	valid until = (when the acquire or renewal request was SENT) + TTL - drift
//
// Counting from the send, not the reply, covers the request's time in flight
// and in the server's queue: the server started the TTL no earlier than the
// send. drift = TTL/100 + 2 ms is the Redis guidance's margin for the two
// clocks running at different rates. The estimate is the deadline of the
// Lock's Context, which ends when it passes — before the key can expire on
// the server, even if Redis has stopped answering altogether.
//
//	acquire sent     renewal sent      renewal sent
//	    |--- TTL/3 ---|---- TTL/3 ------|------ ... (WithAutoRenew)
//	    |<------------ TTL - drift ----------->|  first estimate
//	                  |<------------ TTL - drift ----------->|  after renewal
//	    |<--------------------- MaxHold --------------------------->|  ceiling
//
// The Context also ends, with a cause that context.Cause reports, when:
//   - Unlock releases the lock (ErrReleased);
//   - a renewal, Extend, TTL or Unlock finds the token gone (ErrKeyLost);
//   - the estimate runs out without renewal (ErrLeaseExpired);
//   - the WithMaxHold ceiling is reached (ErrMaxHold).

// drift returns the margin for clock drift subtracted from every lease
// estimate: a hundredth of the TTL plus 2 ms, as the Redis guidance suggests.
func drift(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

// validUntil is when a grant or renewal of ttl, sent at sent, is safely
// over: sent + ttl - drift(ttl), the hold ceiling aside (lease.until).
func validUntil(sent time.Time, ttl time.Duration) time.Time {
	return sent.Add(ttl - drift(ttl))
}

// lease is a Lock's local estimate of its validity, and the context that
// ends with it.
type lease struct {
	holdEnd time.Time // the WithMaxHold ceiling; zero for none

	mu       sync.Mutex
	deadline time.Time   // current estimate of validity
	capped   bool        // deadline is limited by holdEnd
	why      error       // why the lease ended (the first cause sticks); nil while it lasts
	timer    *time.Timer // ends the lease at the deadline; nil until watched
	// ctx ends, with cause why, when the lease does. Made by watch, with
	// the timer: a lock that is only taken and released never needs it,
	// and would pay for making and cancelling it.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// init starts the lease of a grant of ttl sent at sent (a zero lease
// until then).
func (ls *lease) init(sent time.Time, ttl time.Duration, o options) {
	if o.hasMaxHold {
		ls.holdEnd = sent.Add(o.maxHold)
	}
	ls.deadline, ls.capped = ls.until(sent, ttl, o.hasMaxHold && ttl >= o.maxHold)
}

// watch makes the lease's context and starts the timer that ends it at its
// deadline, if not done yet, and returns ls. Only what waits on the context
// needs the timer (Lock.Context, Do, the watchdog, an observer), so it
// starts with the first of them: a lock that is only taken and released
// never starts one. That matters for speed, not just tidiness: starting a
// timer wakes the Go runtime's network poller on another thread, which
// costs more than everything else the library does for an uncontended lock.
// A lease whose deadline has passed by then ends at once.
func (ls *lease) watch() *lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.contextLocked()
	if ls.timer == nil && ls.why == nil {
		if left := time.Until(ls.deadline); left > 0 {
			ls.timer = time.AfterFunc(left, ls.expire)
		} else {
			ls.endLocked() // a lease that is over is done when it is looked at
		}
	}
	return ls
}

// done returns a channel closed when the lease ends (by end, or at its
// deadline once watched): its context's, made now if not yet, without the
// timer.
func (ls *lease) done() <-chan struct{} {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.contextLocked().Done()
}

// contextLocked returns the lease's context, made now if not yet (ended
// at once if the lease has). Called with ls.mu held.
func (ls *lease) contextLocked() context.Context {
	if ls.ctx == nil {
		ls.ctx, ls.cancel = context.WithCancelCause(context.Background())
		if ls.why != nil {
			ls.cancel(ls.why)
		}
	}
	return ls.ctx
}

// over reports whether the lease has ended, ending it first if its
// deadline has passed (its timer may not have run yet, or never started).
func (ls *lease) over() bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.why == nil && !time.Now().Before(ls.deadline) {
		ls.endLocked()
	}
	return ls.why != nil
}

// until returns the validity that a grant or renewal of ttl, sent at sent,
// gives: sent + ttl - drift, but never past the hold ceiling. capped tells
// whether the ceiling limits it: cut is true when ttl was already cut to
// end at the ceiling.
func (ls *lease) until(sent time.Time, ttl time.Duration, cut bool) (deadline time.Time, capped bool) {
	deadline = validUntil(sent, ttl)
	if !ls.holdEnd.IsZero() && !deadline.Before(ls.holdEnd) {
		return ls.holdEnd, true
	}
	return deadline, cut
}

// renewalTTL returns the TTL to ask for in a renewal of ttl sent at sent:
// cut so that the key expires no later than the hold ceiling (cut is then
// true). room is false when less than MinTTL is left before the ceiling: no
// renewal is possible.
func (ls *lease) renewalTTL(sent time.Time, ttl time.Duration) (_ time.Duration, cut, room bool) {
	if !ls.holdEnd.IsZero() {
		if left := ls.holdEnd.Sub(sent).Truncate(time.Millisecond); left <= ttl {
			ttl, cut = left, true
		}
	}
	return ttl, cut, ttl >= MinTTL
}

// renewed moves the estimate after a renewal of ttl sent at sent succeeded.
// A lease that has ended stays ended.
func (ls *lease) renewed(sent time.Time, ttl time.Duration, cut bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.why != nil {
		return
	}
	ls.deadline, ls.capped = ls.until(sent, ttl, cut)
	if ls.timer != nil {
		ls.timer.Reset(time.Until(ls.deadline))
	}
}

// expire runs when the timer fires: it ends the lease unless a renewal has
// moved the deadline since.
func (ls *lease) expire() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if time.Now().Before(ls.deadline) {
		return // renewed; the timer was reset
	}
	ls.endLocked()
}

// endLocked ends the lease at its deadline, with the cause that says
// which limit it reached. Called with ls.mu held.
func (ls *lease) endLocked() {
	if ls.capped {
		ls.endWith(ErrMaxHold)
	} else {
		ls.endWith(ErrLeaseExpired)
	}
}

// endWith ends the lease with cause, unless it has ended already, and its
// context if made. Called with ls.mu held. (Cancelling runs no callback
// here: context.AfterFunc's run in goroutines of their own.)
func (ls *lease) endWith(cause error) {
	if ls.why != nil {
		return
	}
	ls.why = cause
	if ls.cancel != nil {
		ls.cancel(cause)
	}
}

// end ends the lease with cause (the first cause sticks).
func (ls *lease) end(cause error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.endWith(cause)
	if ls.timer != nil {
		ls.timer.Stop()
	}
}

// ended reports why the lease ended, or nil while it lasts.
func (ls *lease) ended() error {
	ls.mu.Lock()
	why := ls.why
	ls.mu.Unlock()
	return why
}

func (ls *lease) validUntil() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.deadline
}

// leaseBound is a context that the lease ends on the clock: its Done, Err
// and Value (through which context.Cause reads the cause) end the lease
// first if its deadline has passed, and then the context (cancel, when
// the lease does not end it by itself). From the deadline on, the context
// is done, although the timer that would end it may not have run yet (a
// timer fires late on a busy machine, and not at all in a process that
// was paused).
type leaseBound struct {
	context.Context
	ls     *lease
	cancel context.CancelCauseFunc // nil when the lease's end ends Context
}

// over ends the context if the lease has ended.
func (c leaseBound) over() {
	if c.ls.over() && c.cancel != nil {
		c.cancel(c.ls.ended())
	}
}

// Done is the context's channel, closed from the lease's deadline on.
func (c leaseBound) Done() <-chan struct{} {
	c.over()
	return c.Context.Done()
}

// Err is nil while the lease lasts, and not nil from its end on.
func (c leaseBound) Err() error {
	c.over()
	return c.Context.Err()
}

// Value is the context's value for key (see Done).
func (c leaseBound) Value(key any) any {
	c.over()
	return c.Context.Value(key)
}

// leaseContext is a Lock's Context: ended by the lease, with a deadline that
// follows the lease estimate as renewals move it. (Unlike most contexts, its
// deadline can move later; anything derived from it keeps the deadline it
// saw, which errs on the safe side.)
type leaseContext struct{ leaseBound }

// Deadline is the lease estimate as it stands now.
func (c leaseContext) Deadline() (time.Time, bool) { return c.ls.validUntil(), true }

// watchdog renews the lock every TTL/3 until it is stopped, the lock is
// lost, the hold ceiling leaves no room for another renewal, or the Client
// is closed. A failed renewal (Redis unreachable) is retried while the lease
// lasts; if none succeeds in time, the lease's own timer ends the Context.
// Its first renewal comes a third of the way into what the grant gave
// (a hand-off's lease counts from an earlier step).
//
// Renewals ask for the TTL, or for what the last Extend asked for: nothing
// in the background undoes an explicit Extend.
func (l *Lock) watchdog(stop <-chan struct{}) {
	interval := l.ttl / 3
	first := min(l.ttl, l.valid) / 3
	timer := time.NewTimer(time.Until(l.acquired.Add(first)))
	defer timer.Stop()
	leaseDone := l.lease.done()
	for {
		select {
		case <-timer.C:
		case <-stop:
			return
		case <-l.c.done:
			return
		case <-leaseDone:
			return
		}
		ttl := l.ttl
		if e := l.extended.Load(); e > 0 {
			ttl = time.Duration(e)
		}
		// Bound the attempt by the lease: past it, renewing is pointless.
		// The hold's span, when traced, is the renewal's parent: its
		// values, not its caller's cancellation.
		ctx, cancel := context.WithDeadline(context.WithoutCancel(l.holdContext(context.Background())), l.lease.validUntil())
		sent, err := l.renew(ctx, ttl)
		cancel()
		switch {
		case err == errNoRoom, errors.Is(err, ErrNotHeld), l.lease.ended() != nil:
			return // the lease ends at the ceiling, or has ended
		case err != nil:
			// Try again soon, while the lease lasts.
			l.c.warn("dlock: renewal failed; retrying while the lease lasts", slog.String("key", l.Key()), slog.Int64("fence", l.fence), slog.Any("err", err))
			timer.Reset(retryDelay(min(interval, first)/4, -1))
		default:
			timer.Reset(time.Until(sent.Add(interval)))
		}
	}
}
