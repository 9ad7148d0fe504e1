package dlock

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// The lease model (docs/leases.md). Redis lets anyone else in once the
// key's TTL has run out, so the holder estimates when that can happen, on
// its own monotonic clock:
//
//	valid until = (when the acquire or renewal request was SENT) + TTL - drift
//
// The server started the TTL no earlier than the send, and drift covers the
// two clocks' rates: the Lock's Context ends at this estimate, before the
// key can expire on the server, even if Redis stops answering.

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
	// ctx ends, with cause why, when the lease does.
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// init starts the lease of a grant of ttl sent at sent.
func (ls *lease) init(sent time.Time, ttl time.Duration, o options) {
	if o.hasMaxHold {
		ls.holdEnd = sent.Add(o.maxHold)
	}
	ls.deadline, ls.capped = ls.until(sent, ttl, o.hasMaxHold && ttl >= o.maxHold)
	ls.ctx, ls.cancel = context.WithCancelCause(context.Background())
}

// watch makes the timer that ends the lease at its deadline, once, and
// returns ls; a lease already over ends now. A lock
// only taken and released starts no timer: starting one wakes the network
// poller on another thread, the dearest step of an uncontended lock.
func (ls *lease) watch() *lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.timer == nil && ls.why == nil {
		if left := time.Until(ls.deadline); left > 0 {
			ls.timer = time.AfterFunc(left, ls.expire)
		} else {
			ls.endLocked() // a lease that is over is done when it is looked at
		}
	}
	return ls
}

// done returns the lease's context's channel, closed when the lease ends
// (by end, or at its deadline once watched), without starting the timer.
func (ls *lease) done() <-chan struct{} { return ls.ctx.Done() }

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

// until returns the validity a grant or renewal of ttl sent at sent gives:
// sent + ttl - drift, never past the hold ceiling; capped tells whether the
// ceiling limits it (cut: ttl was already cut to end there).
func (ls *lease) until(sent time.Time, ttl time.Duration, cut bool) (deadline time.Time, capped bool) {
	deadline = validUntil(sent, ttl)
	if !ls.holdEnd.IsZero() && !deadline.Before(ls.holdEnd) {
		return ls.holdEnd, true
	}
	return deadline, cut
}

// renewalTTL returns the TTL for a renewal of ttl sent at sent, cut (cut
// true) so the key expires by the hold ceiling; room is false when less
// than MinTTL is left before it.
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

// endWith ends the lease and its context with cause, unless ended. ls.mu is
// held (cancelling runs no callback here: AfterFuncs get goroutines).
func (ls *lease) endWith(cause error) {
	if ls.why != nil {
		return
	}
	ls.why = cause
	ls.cancel(cause)
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

// leaseBound is a context the lease ends on the clock: Done, Err and Value
// (context.Cause's way in) end the lease, then the context (cancel, unless
// the lease's end ends it), once the deadline has passed, even if the timer
// has not run (late on a busy machine, never in a paused process).
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

// leaseContext is a Lock's Context, whose deadline follows the lease as
// renewals move it later (a derived context keeps the one it saw: safe).
type leaseContext struct{ leaseBound }

// Deadline is the lease estimate as it stands now.
func (c leaseContext) Deadline() (time.Time, bool) { return c.ls.validUntil(), true }

// watchdog renews the lock every TTL/3 (the first a third of what the grant
// gave) until stopped, lost, out of room before the hold ceiling, or the
// Client closes; a failed renewal is retried while the lease lasts. It asks
// for the TTL, or the last Extend's: nothing in the background undoes it.
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
		// Bounded by the lease; under the hold span, if traced (its values,
		// not its caller's cancellation).
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
