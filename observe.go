package dlock

import (
	"context"
	"errors"
	"log/slog"
	"time"
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
	// EventLost: the lock's Context ended other than by a release (an
	// Unlock that finds the key gone counts too); Err is the cause (ErrKeyLost,
	// ErrLeaseExpired, ErrMaxHold). A loss found before Unlock returns is
	// reported by then.
	EventLost
	// EventRelease: Unlock returned. Held is the time since the grant; Err
	// is nil, an error matching ErrNotHeld (the token no longer matched:
	// the lock had expired, and perhaps someone else held it), or a
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
	Primitive string        // what holds it: "lock", "election", "semaphore", "read" or "write" (a read-write lock's holds)
	Fence     int64         // 0 when no lock was obtained
	Wait      time.Duration // EventAcquire: how long the call took
	Held      time.Duration // EventRelease: time since the grant
	Contended bool          // EventAcquire: the lock was held by someone else, or the wait ended first; false when no node answered
	Err       error         // nil on success; otherwise the call's error, or the loss's cause
	Nodes     int           // how many Redis nodes the Client asks: 1, or Redlock's N
	// Answered, for EventAcquire, lists the nodes (their indexes in New's
	// order) that answered the call's last request with a reply (a grant,
	// a refusal or an error reply) before the request was decided. With
	// Redlock an attempt is decided as soon as a majority granted, so a
	// healthy node that was merely slower may be missing; a node missing
	// from a decision that had to wait for every answer could not be
	// reached or did not answer within the node timeout. Empty when no node
	// answered (or none was asked: the context had ended); nil when the
	// call was refused before anything was sent (bad input, a closed
	// Client) or no observer or tracer was set when it began.
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

// SetObserver makes the Client report to o (nil: to nobody), from the
// operations that begin from now on. Without an observer or a tracer, an
// operation reads one atomic pointer to find that out, and that is all it
// costs.
func (c *Client) SetObserver(o Observer) { c.setHooks(func(h *hooks) { h.observer = o }) }

// hooks are what a Client reports to: its observer and its tracer. The
// Client holds a pointer to them that is nil when neither is set, so that
// an operation with nothing to report costs one atomic load.
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

// acquireStart returns when an acquisition call begins, for h's report, or
// the zero time when h reports nothing (no observer or tracer): reading
// the clock is work the uncontended path is spared.
func (h *hooks) acquireStart() time.Time {
	if h == nil {
		return time.Time{}
	}
	return time.Now()
}

// observeAcquire reports the end of an acquisition call to h's observer
// and to end, the call's span (nil: none); h are the hooks loaded when it
// began. note is what the attempts recorded (nil when nobody reads it).
func (c *Client) observeAcquire(h *hooks, key, primitive string, start time.Time, l *Lock, contended bool, err error, note *acquireNote, end func(Event)) {
	if h == nil {
		return
	}
	e := Event{Kind: EventAcquire, Key: key, Primitive: primitive, Wait: time.Since(start), Contended: contended || errors.Is(err, ErrNotObtained) && !errors.Is(err, ErrNoQuorum), Err: err, Nodes: len(c.nodes)}
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

// watchLoss reports EventLost when l's lease ends for any reason but a
// release (lost).
// It registers nothing unless an observer or a logger is set.
func (c *Client) watchLoss(l *Lock) {
	if h := c.hooks.Load(); (h == nil || h.observer == nil) && c.logger.Load() == nil {
		return
	}
	context.AfterFunc(l.lease.watch().ctx, func() { l.lost() })
}

// lost reports whether l's lease ended lost, and if so reports the loss
// (once: to the observer and the log) and ends the hold span with it. The
// AfterFuncs of watchLoss and startHold call it when the lease ends, each
// on a goroutine of its own; Unlock calls it too, so that a loss found
// before it returns (an Extend that found the key gone, or the release
// itself) is reported by then, and the hold span ends with the loss rather
// than the release.
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

// SetLogger makes the Client log, through l, the few things worth a log
// line that no caller is there to see: a background renewal that failed, a
// lock lost while held, a cleanup (the release of a grant nobody waited
// for) that failed, a Redlock Lock that waits for slow nodes to answer
// (once per call). Default: no logging, but for a node whose
// maxmemory-policy may evict dlock's keys, which is logged once to
// slog.Default when no logger is set (eviction.go). Lines carry the key
// and fence, never the token.
func (c *Client) SetLogger(l *slog.Logger) { c.logger.Store(l) }

// warn logs at warning level, if a logger is set.
func (c *Client) warn(msg string, attrs ...slog.Attr) {
	if l := c.logger.Load(); l != nil {
		l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
	}
}
