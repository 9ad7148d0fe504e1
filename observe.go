package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/tokens"
)

// EventKind says what an Event reports.
type EventKind int

// The kinds of Event, after the Redis guidance's list of what to record.
const (
	// EventAcquire: a TryLock, Lock or Do call obtained the lock or gave up.
	// Wait is how long the call took; Contended, whether the lock was held
	// by someone else at some point; Err is nil, or why it was not obtained.
	EventAcquire EventKind = iota + 1
	// EventRenew: a renewal (the watchdog, or Extend) succeeded (Err nil)
	// or failed.
	EventRenew
	// EventLost: the Context ended other than by a release (or Unlock found
	// the key gone); Err is the cause, reported before Unlock returns.
	EventLost
	// EventRelease: Unlock returned. Held is the time since the grant; Err
	// is nil, an error matching ErrNotHeld (the lock had expired), or a
	// failure.
	EventRelease
)

// String returns the kind's name: acquire, renew, lost or release.
func (k EventKind) String() string {
	switch k {
	case EventAcquire:
		return "acquire"
	case EventRenew:
		return "renew"
	case EventLost:
		return "lost"
	case EventRelease:
		return "release"
	}
	return "unknown"
}

// Event is one observation of a lock's life, given to the Client's Observer.
// It never carries the token.
type Event struct {
	Kind      EventKind     // what happened
	Key       string        // the lock's key
	Primitive string        // what holds it: "lock", "election", "semaphore" or "rwmutex" (as Status.Kind)
	Mode      string        // an rwmutex's hold: "read" or "write" (as Status.Mode); "" for the others
	Fence     int64         // 0 when no lock was obtained
	Wait      time.Duration // EventAcquire: how long the call took
	Held      time.Duration // EventRelease: time since the grant
	Contended bool          // EventAcquire: the lock was held by someone else, or the wait ended first; false when no node answered
	Err       error         // nil on success; otherwise the call's error, or the loss's cause
	Nodes     int           // how many Redis nodes the Client asks: 1, or Redlock's N
	// Answered, for EventAcquire, lists the nodes (indexes in New's order)
	// that replied (a grant, a refusal or an error reply) to the call's
	// last request before it was decided; a Redlock attempt is decided once
	// a majority granted, so a slower healthy node may be missing. Empty
	// when no node answered (or none was asked: the context had ended); nil
	// when the call was refused before sending, or had no observer or
	// tracer.
	Answered []int
}

// Outcome names the event's result in a word, the one the metrics adapters
// use as a label:
//   - EventAcquire: obtained; contended (held by someone else, or the wait
//     ended first); or error (Redis failed, or too few Redlock nodes
//     answered, even when the wait ended meanwhile);
//   - EventRenew: ok, not_held or error;
//   - EventRelease: ok, token_mismatch (the lock had expired, and perhaps
//     someone else held it) or error;
//   - EventLost: the cause, token_gone, lease_expired or max_hold.
func (e Event) Outcome() string {
	switch e.Kind {
	case EventAcquire:
		switch {
		case e.Err == nil:
			return "obtained"
		case errors.Is(e.Err, ErrNoQuorum):
			return "error"
		case errors.Is(e.Err, ErrNotObtained):
			return "contended"
		}
		return "error"
	case EventRenew:
		return resultOf(e.Err, "not_held")
	case EventRelease:
		return resultOf(e.Err, "token_mismatch")
	case EventLost:
		switch {
		case errors.Is(e.Err, ErrLeaseExpired):
			return "lease_expired"
		case errors.Is(e.Err, ErrMaxHold):
			return "max_hold"
		}
		return "token_gone"
	}
	return "unknown"
}

// resultOf is ok, notHeld when err matches ErrNotHeld, or error.
func resultOf(err error, notHeld string) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrNotHeld):
		return notHeld
	}
	return "error"
}

// An Observer receives Events. It is called synchronously from the
// goroutine that did the work, so it must be quick and must not call back
// into the Lock; it may be called from several goroutines at once.
type Observer func(Event)

// SetObserver makes the Client report to o (nil: nobody) from the
// operations that begin from now on. Without an observer or tracer, an
// operation pays one atomic load.
func (c *Client) SetObserver(o Observer) { c.setHooks(func(h *hooks) { h.observer = o }) }

// hooks are a Client's observer and tracer; the Client's pointer to them is
// nil when neither is set.
type hooks struct {
	observer Observer
	tracer   Tracer
}

// setHooks changes the Client's hooks with change.
func (c *Client) setHooks(change func(*hooks)) {
	for {
		old := c.hooks.Load()
		var h hooks
		if old != nil {
			h = *old
		}
		change(&h)
		var next *hooks
		if h.observer != nil || h.tracer != nil {
			next = &h
		}
		if c.hooks.CompareAndSwap(old, next) {
			return
		}
	}
}

// observe reports e to h's observer, if any.
func (h *hooks) observe(e Event) {
	if h != nil && h.observer != nil {
		h.observer(e)
	}
}

// acquireStart returns when an acquisition call begins, or zero if h
// reports nothing: the uncontended path is spared reading the clock.
func (h *hooks) acquireStart() time.Time {
	if h == nil {
		return time.Time{}
	}
	return time.Now()
}

// observeAcquire reports the end of an acquisition call to h (loaded when
// it began) and to end, its span (nil: none); note is the attempts' record.
func (c *Client) observeAcquire(h *hooks, key string, o options, start time.Time, l *Lock, contended bool, err error, note *acquireNote, end func(Event)) {
	if h == nil {
		return
	}
	e := Event{Kind: EventAcquire, Key: key, Primitive: o.primitive(), Mode: tokens.Mode(o.kind), Wait: time.Since(start), Contended: contended || errors.Is(err, ErrNotObtained) && !errors.Is(err, ErrNoQuorum), Err: err, Nodes: len(c.nodes)}
	if l != nil {
		e.Fence = l.fence
	}
	if note != nil {
		e.Answered = []int{} // no request went out: the context had ended
		if a := note.answered.Load(); a != nil {
			e.Answered = *a
		}
	}
	if e.Answered != nil && len(e.Answered) == 0 {
		e.Contended = false // nobody answered: nobody was seen holding it
	}
	h.report(e, end)
}

// report gives e to h's observer (h may be nil) and to end, an
// operation's span (nil: none).
func (h *hooks) report(e Event, end func(Event)) {
	h.observe(e)
	if end != nil {
		end(e)
	}
}

// newAcquireNote returns a note for an acquisition's Event, or nil when
// no observer or tracer (h) will read it.
func newAcquireNote(h *hooks) *acquireNote {
	if h == nil {
		return nil
	}
	return &acquireNote{}
}

// watchLoss reports EventLost when l's lease ends other than by release; it
// registers nothing unless an observer or a logger is set.
func (c *Client) watchLoss(l *Lock) {
	if h := c.hooks.Load(); (h == nil || h.observer == nil) && c.logger.Load() == nil {
		return
	}
	context.AfterFunc(l.lease.watch().ctx, func() { l.lost() })
}

// lost reports whether l's lease ended lost, and if so reports the loss
// once (observer, log) and ends the hold span with it. The lease's
// AfterFuncs call it, and Unlock, so that a loss found before it returns is
// reported by then and ends the hold span instead of the release.
func (l *Lock) lost() bool {
	cause := l.lease.ended()
	if cause == nil || cause == ErrReleased || !errors.Is(cause, ErrLost) { // the usual two first: errors.Is walks
		return false
	}
	e := l.event(EventLost, cause)
	l.lossOnce.Do(func() {
		l.c.hooks.Load().observe(e)
		l.c.warn("dlock: lock lost", slog.String("key", l.Key()), slog.Int64("fence", l.fence), slog.String("cause", cause.Error()))
	})
	l.endHold(e)
	return true
}

// SetLogger makes the Client log, through l, what no caller is there to
// see: a failed background renewal, a lock lost while held, a failed
// cleanup (giving back a grant nobody waited for), a Redlock Lock waiting
// for slow nodes (once per call). Default: none, but a node whose
// maxmemory-policy may evict dlock's keys is logged once to slog.Default
// (eviction.go). Lines carry the key and fence, never the token.
func (c *Client) SetLogger(l *slog.Logger) { c.logger.Store(l) }

// warn logs at warning level, if a logger is set.
func (c *Client) warn(msg string, attrs ...slog.Attr) {
	if l := c.logger.Load(); l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
	}
}
