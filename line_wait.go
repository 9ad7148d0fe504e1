package dlock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wait"
)

// waitInLine is Lock for a mutex on one node: it drives a wait.Waiter from
// the first acquire (which grants the key, or queues the caller) to the
// grant or the caller's error. contended is set when the key was taken.
func (c *Client) waitInLine(ctx context.Context, nm *lockNames, o options, contended *bool) (*Lock, error) {
	if !c.begin() { // Close waits for the wait, its leave included
		return nil, notObtained(ErrClosed)
	}
	token, err := tokens.New(o.kind, o.value, o.candidate)
	if err != nil {
		c.end()
		return nil, err
	}
	if !c.holdBack(ctx) {
		c.end()
		return nil, notObtained(c.stopped(ctx))
	}
	fast, sent := c.nodes[0].fast(nm, token, o), time.Now()
	var first *wait.Event
	if fast {
		l, ev := c.lockFast(ctx, nm, token, o, sent)
		if l != nil {
			c.end()
			return l, nil
		}
		first = &ev
	}
	d := &driver{c: c, n: c.nodes[0], nm: nm, o: o, id: c.newWaiterID(o), wakes: make(chan wake, 1), sent: sent}
	d.w = wait.New(wait.Config{ID: d.id, Token: token, TTL: o.ttl, Keep: max(o.fenceKeep(), lineClaim),
		Alive: lineAlive, Poll: linePoll, Claim: lineClaim, Retry: outageFirst, RetryMax: outageMost,
		Drift: float64(drift(o.ttl)) / float64(o.ttl), // the Lock's own lease: lease.go
		Fast:  fast})
	return d.run(ctx, contended, first)
}

// watchLinger is how long a key's wake subscription outlives its last
// waiter, so that goroutines taking turns on a key do not resubscribe each
// turn (line_wakes.go).
const watchLinger = 100 * time.Millisecond

// leaveWait is how long a waiter that gives up waits for its leave's
// answer before Lock returns: enough for a server that answers, so that a
// release right after finds the line without it, short on a stalled one.
const leaveWait = 50 * time.Millisecond

// leavingLimit is how many waiters may be leaving the line before new
// waits are held back (holdBack).
const leavingLimit = 64

// holdBack waits while leavingLimit waiters of c are leaving the line, so
// that callers who give up faster than the server runs their scripts do
// not fill the line with waiters that have gone, to whom every hand-off
// would go first; false if ctx ended or c closed first.
func (c *Client) holdBack(ctx context.Context) bool {
	select {
	case c.leaving <- struct{}{}:
		<-c.leaving
		return true
	case <-ctx.Done():
	case <-c.done:
	}
	return false
}

// driver carries one Waiter's commands out and its events in, in the
// caller's goroutine until the caller has its answer, then (a leave) in one
// of its own. A script runs with the caller's context, and the transport
// stops waiting for it when that context ends: its outcome is then unknown
// (the Waiter's Failed, and unsure).
type driver struct {
	c  *Client
	n  *node
	nm *lockNames
	o  options
	id string
	w  *wait.Waiter

	wakes   chan wake       // wake messages naming this waiter, and a handover (Client.wakes)
	ready   <-chan struct{} // closed once the wake channel is subscribed; nil before
	timer   *time.Timer
	pending *wait.Event // a failure told first as a Cancel, to feed next

	script   wait.Command // the script do returns (a field: no allocation per script)
	added    bool         // in c.wakes' waiters (from its first full acquire: a fast one never queues)
	sent     time.Time    // the send of the last acquire
	unsure   []error      // the failures of acquires that went unanswered and may still run
	unready  bool         // it was sent before the subscription was ready
	replied  bool         // some acquire was answered
	last     error        // the last node error of an outage ridden out
	answered bool         // the caller has its answer
}

// run steps the waiter until the caller has its answer, then finishes (a
// leave) in the background, where Close waits for it. first, if not nil,
// is the reply to the Waiter's first command, the fast acquire, which
// lockFast ran at d.sent before the Waiter was made (line_fast.go).
func (d *driver) run(ctx context.Context, contended *bool, first *wait.Event) (*Lock, error) {
	cmds := d.w.Step(wait.Event{Kind: wait.Start, Now: d.sent})
	if first != nil {
		cmds = d.w.Step(d.replied1(ctx, *first))
	}
	for {
		l, err, answer, script := d.do(cmds, contended)
		switch {
		case answer && (l != nil || d.w.State() == wait.Done): // a Lock releases itself (Unlock)
			d.finish()
			return l, err
		case answer:
			d.goLeave(script)
			return l, err
		case script != nil:
			cmds = d.w.Step(d.replied1(ctx, d.exec(ctx, *script)))
		default:
			cmds = d.w.Step(d.next(ctx))
		}
	}
}

// goLeave runs the rest of the wait (its leave, first script) in the
// background, and waits a little for it: so that callers who give up faster
// than the server answers do not fill the line with waiters that have gone.
func (d *driver) goLeave(script *wait.Command) {
	left := make(chan struct{})
	select {
	case d.c.leaving <- struct{}{}: // a slot, if one is free (holdBack)
		d.c.spawn(func() { defer func() { <-d.c.leaving }(); defer close(left); d.leave(script) })
	default:
		d.c.spawn(func() { defer close(left); d.leave(script) })
	}
	t := time.NewTimer(leaveWait)
	defer t.Stop()
	select {
	case <-left:
	case <-t.C:
	}
}

// leave runs the waiter to Done after its caller has gone, script first:
// no Cancel any more, bounded by twice cleanupTimeout (a leave retried
// through a stall). It stops early once the user's go-redis client is
// closed: no script can reach the server then, and what the waiter leaves
// behind lapses as a crashed process's would: its record by its alive
// time, a grant by its claim, a key handed over to it within its Client
// (line_handover.go) by its TTL.
func (d *driver) leave(script *wait.Command) {
	ctx, cancel := d.c.cleanupContext(2 * cleanupTimeout)
	defer cancel()
	for d.w.State() != wait.Done && ctx.Err() == nil {
		if script != nil {
			ev := d.exec(ctx, *script)
			if errors.Is(ev.Err, redis.ErrClosed) {
				break
			}
			_, _, _, script = d.do(d.w.Step(d.replied1(ctx, ev)), nil)
			continue
		}
		_, _, _, script = d.do(d.w.Step(d.next(ctx)), nil)
	}
	d.finish()
}

// finish ends the wait: its timer, its subscription, its call.
func (d *driver) finish() {
	if d.timer != nil {
		d.timer.Stop()
	}
	if d.added || d.ready != nil {
		d.c.wakes.leave(d.nm.key, d.id, d.ready != nil)
	}
	d.c.end()
}

// do carries out cmds but their script, which it returns (at most one);
// answer: the caller's answer is l or err.
func (d *driver) do(cmds []wait.Command, contended *bool) (l *Lock, err error, answer bool, script *wait.Command) {
	for _, cmd := range cmds {
		switch cmd.Kind {
		case wait.RunAcquire, wait.RunRelease: // (the fast acquire, only ever first, is lockFast's)
			d.script = cmd
			script = &d.script
		case wait.WakeAt:
			d.waitFor(cmd.At)
		case wait.Grant:
			l, answer = newLock(d.c, d.nm, d.w.Token(), cmd.Fence, d.o, d.sent, d.o.ttl), true
		case wait.Fail:
			err, answer = cmd.Err, true
		}
	}
	if contended != nil && d.w.State() == wait.Queued && d.replied {
		*contended = true
	}
	return l, err, answer, script
}

// waitFor sets the timer for at; the first also subscribes to the wake
// channel: a hand-off published before the subscription is ready is then
// missed, so its readiness wakes the waiter (next).
func (d *driver) waitFor(at time.Time) {
	if d.timer != nil {
		d.timer.Reset(time.Until(at))
		return
	}
	d.timer = time.NewTimer(time.Until(at))
	d.ready = d.c.wakes.join(d.c, d.n, d.nm)
	d.unready = !isClosed(d.ready)
}

// exec runs a script with ctx (bounded by the node timeout, if any) and
// returns its reply as the Waiter's event.
func (d *driver) exec(ctx context.Context, cmd wait.Command) wait.Event {
	if d.o.hasNodeTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d.o.nodeTimeout, ask.ErrNodeTimeout)
		defer cancel()
	}
	if cmd.Kind == wait.RunAcquire {
		if !d.added { // before it can be in the line: a handover finds it from then on
			d.c.wakes.add(d.nm.key, d.id, d.wakes)
			d.added = true
		}
		d.sent, d.unready = time.Now(), d.ready != nil && !isClosed(d.ready)
		return replyEvent(d.n.acquireLine(ctx, d.nm, cmd.Args[0], d.id, d.o))
	}
	for _, err := range d.unsure {
		// An acquire that failed unanswered may still be sent (a
		// pipeliner's retry, a stalled server's queue): the leave goes
		// after none can any more. (Every one: the node timeout and the
		// backoff let a waiter send the next while one still waits.)
		transport.Settled(ctx, err)
	}
	ok, err := d.n.releaseLine(ctx, d.nm, cmd.Args[0], d.id, d.w.Keep())
	if err == nil && !ok {
		return wait.Event{Kind: wait.Reply, Result: wait.Result{Status: wait.NotHeld}}
	}
	return replyEvent(grant{}, err)
}

// replyEvent is a script's reply as the Waiter reads it (a release's: any).
func replyEvent(g grant, err error) wait.Event {
	if err != nil {
		return wait.Event{Kind: wait.Failed, Err: err}
	}
	r := wait.Result{Status: wait.Enqueued, Fence: g.fence, PTTL: g.pttl}
	if g.ok {
		r.Status = wait.Granted
	}
	return wait.Event{Kind: wait.Reply, Result: r}
}

// next waits for the next event: a failure told first as a Cancel, a
// wake, the timer, the subscription's readiness (which wakes an acquire
// sent before it), or ctx ending (or the Client closing).
func (d *driver) next(ctx context.Context) wait.Event {
	if ev := d.pending; ev != nil {
		d.pending = nil
		return *ev
	}
	var ready, closed <-chan struct{}
	var timer <-chan time.Time
	if d.timer != nil {
		timer = d.timer.C
	}
	if d.unready {
		ready = d.ready
	}
	if !d.answered { // the caller's ctx (leave's: none) and Close end the wait once
		closed = d.c.done
	}
	select {
	case m := <-d.wakes:
		if !m.since.IsZero() { // a handover: the lease counts from the release's send
			d.sent = m.since
			return wait.Event{Kind: wait.Handed, Now: time.Now(), Fence: m.fence, Since: m.since}
		}
		return wait.Event{Kind: wait.Wake, Now: time.Now(), Fence: m.fence}
	case <-timer:
		return wait.Event{Kind: wait.Timer, Now: time.Now()}
	case <-ready:
		d.unready = false
		return wait.Event{Kind: wait.Wake, Now: time.Now()}
	case <-ctx.Done():
		d.answered = true
		return wait.Event{Kind: wait.Cancel, Now: time.Now(), Err: d.ended(ctx)}
	case <-closed:
		d.answered = true
		return wait.Event{Kind: wait.Cancel, Now: time.Now(), Err: d.outage(ErrClosed)}
	}
}

// replied1 is a script's reply event, Now stamped. A failure that waiting
// cannot fix, or any reply once ctx has ended (go-redis ends no read when a
// context does: the reply may come long after), is first told to the
// caller, as a Cancel, and fed after it (pending): the Waiter then leaves,
// giving back a grant it brought. So Lock returns no lock after its ctx
// ended, as TryLock's judge returns none either.
func (d *driver) replied1(ctx context.Context, ev wait.Event) wait.Event {
	ev.Now = time.Now()
	if d.w.State() == wait.Acquiring {
		noteStep(d.o.note, ev.Err, false)
		d.unsure = slices.DeleteFunc(d.unsure, func(err error) bool { return !transport.Pending(err) })
		if transport.Pending(ev.Err) {
			d.unsure = append(d.unsure, ev.Err)
		}
	}
	if ev.Kind == wait.Reply {
		d.replied, d.last = true, nil
	}
	if d.answered || d.w.State() != wait.Acquiring {
		return ev
	}
	if ev.Kind == wait.Reply && ctx.Err() == nil {
		return ev
	}
	if d.o.failFast || !transient(ev.Err) || ctx.Err() != nil {
		d.answered = true
		pending := ev
		d.pending = &pending
		if ctx.Err() != nil {
			return wait.Event{Kind: wait.Cancel, Now: ev.Now, Err: d.ended(ctx)}
		}
		return wait.Event{Kind: wait.Cancel, Now: ev.Now, Err: ev.Err}
	}
	d.last = ev.Err
	return ev
}

// ended is the caller's error when ctx ended the wait.
func (d *driver) ended(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrClosed) && ctx.Err() != nil {
		return d.outage(ErrClosed)
	}
	return d.outage(ctx.Err())
}

// outage is the error of a wait that ended for cause, with the node's last
// error if it was riding out an outage (outageErr).
func (d *driver) outage(cause error) error { return outageErr(cause, d.last) }

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
