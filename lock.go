package dlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// Lock is one acquisition of a lock: the key, the random token stored at it,
// the fencing token issued with it, and the lease (see Context). It is safe
// for concurrent use; every operation that changes the lock checks on the
// server, atomically, that the key still holds this token, so a Lock can
// never release or extend a lock that someone else holds.
type Lock struct {
	c        *Client
	names    *lockNames // the key and the names derived from it
	token    string
	fence    int64
	raise    int64                     // what a release raises each node's fencing counter to: the fence, or 0 on one node
	ttl      time.Duration             // the lease asked for at acquire, and by renewals
	keep     time.Duration             // how long the fencing counter is kept from a grant (fence.go)
	timeout  time.Duration             // per-node timeout (0: none)
	acquired time.Time                 // when the acquire request was sent
	valid    time.Duration             // how long the key lived from then (a hand-off counts from an earlier step)
	lease    lease                     // a field, not a pointer: one allocation less per lock
	pending  *transport.Pending[*node] // nodes whose acquire had not answered when it was obtained (transport.Pending)
	waited   atomic.Bool               // obtained after waiting: others likely wait too (node.release's lean)

	stopped chan struct{} // closed when the watchdog has returned; nil without one

	renewed  atomic.Bool  // a renewal or Extend has begun
	extended atomic.Int64 // the TTL the last Extend asked for (ns); 0 before any

	mu           sync.Mutex
	halted       bool                 // Unlock or giveBack has begun: the watchdog stops (halt)
	stop         chan struct{}        // closed once halted; made when first asked for (stopChan)
	renewing     chan struct{}        // a one-slot semaphore: one renewal at a time; made by the first
	released     bool                 // Unlock succeeded, or found the lock gone
	afterRelease func()               // run once Unlock has released the lock (elections announce it)
	hold         atomic.Pointer[hold] // the hold span, when traced (trace.go)
	lossOnce     sync.Once            // the loss is reported once (lost)
}

// errNoRoom is returned by renew when the hold ceiling leaves less than
// MinTTL to renew for.
var errNoRoom = fmt.Errorf("%w: no room left to extend", ErrMaxHold)

// newLock returns the Lock for a grant sent at sent, whose key lives for
// valid from then (the TTL, for a fresh grant).
func newLock(c *Client, nm *lockNames, token string, fence int64, o options, sent time.Time, valid time.Duration) *Lock {
	l := &Lock{token: token}
	l.c, l.names, l.fence, l.ttl, l.keep = c, nm, fence, o.ttl, o.fenceKeep()
	l.acquired, l.valid, l.timeout = sent, valid, o.nodeTimeoutFor(len(c.nodes))
	l.lease.init(sent, valid, o)
	if len(c.nodes) > 1 {
		// A Redlock fence is the maximum over several nodes, and each
		// node's counter must reach it when released (redlock.go). One
		// node's counter holds it already: raising it would cost every
		// release a read for nothing.
		l.raise = fence
	}
	c.watchLoss(l)
	c.checkEviction()
	if o.autoRenew {
		l.lease.watch() // the watchdog stops when the lease ends
		l.stopped = make(chan struct{})
		stop := l.stopChan()
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

// halt marks the lock as being released or given back, which stops its
// watchdog.
func (l *Lock) halt() {
	l.mu.Lock()
	if !l.halted && l.stop != nil {
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

// stopChan returns the channel closed once the lock is halted (the
// watchdog's). It is made on first need: most locks never have a watchdog,
// and a channel is an allocation of 96 bytes.
func (l *Lock) stopChan() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop == nil {
		l.stop = make(chan struct{})
		if l.halted {
			close(l.stop)
		}
	}
	return l.stop
}

// renewSlot returns the one-slot semaphore that lets one renewal run at a
// time, made by the first renewal.
func (l *Lock) renewSlot() chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewing == nil {
		l.renewing = make(chan struct{}, 1)
	}
	return l.renewing
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.names.key }

// Token returns this acquisition's random owner token: the value stored at
// the key while the lock is held (160 bits from crypto/rand, URL-safe
// base64, and the protocol's version, "-v1"), with a '+' after it while others may
// wait or listen for the key (scripts/mark.lua). Treat it as a secret:
// whoever has it can release the lock.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token issued with this acquisition: a number
// strictly greater than every fence issued before it for the same key. Pass
// it to the resource the lock protects, and have the resource refuse any
// write whose fence is lower than one it has already seen; see fence.go and
// the package documentation.
func (l *Lock) Fence() int64 { return l.fence }

// Context returns a context that ends when the lock is released, lost, or
// may have expired. Its deadline is the holder's conservative estimate of the
// lease (see lease.go): the time the acquire or last successful renewal was
// sent, plus the TTL, minus a drift margin, and never past the WithMaxHold
// ceiling. It ends by that deadline even if Redis stops answering, so the
// holder is told before the server can let anyone else in. context.Cause
// says why it ended: ErrReleased, or ErrKeyLost, ErrLeaseExpired or
// ErrMaxHold (all three match ErrLost).
//
// Run the work the lock protects under this context (or one derived from
// it), and stop when it ends. Its Err and Done look at the clock
// themselves: from the deadline on it is done, though the timer that ends
// it may not have fired yet (late on a busy machine, not at all in a paused
// process). A context derived from it (context.WithCancel, WithTimeout)
// ends only when that timer fires, as Go's contexts do: before a step that
// must not run past the lease, ask this context itself, as the guards do.
func (l *Lock) Context() context.Context {
	return leaseContext{leaseBound{l.lease.watch().ctx, &l.lease, nil}}
}

// String describes the lock for logs without revealing its token.
func (l *Lock) String() string {
	return fmt.Sprintf("dlock.Lock{key=%q fence=%d token=%s}", l.Key(), l.fence, redact(l.token))
}

// redact keeps the first few characters of a token, enough to tell tokens
// apart in a log, not enough to use one.
func redact(token string) string {
	kind := ""
	if shared(token) { // keep the kind, and six characters of the random part
		if i := strings.Index(token[1:], "~"); i >= 0 {
			kind, token = token[:i+2], token[i+2:]
		}
	}
	if len(token) <= 6 {
		return kind + "…"
	}
	return kind + token[:6] + "…"
}

// Unlock releases the lock if this Lock still holds it, stops its
// renewal, and ends its Context with cause ErrReleased. It returns an error
// matching ErrNotHeld when the key no longer holds this Lock's token (it
// expired, and perhaps someone else holds it now; that holder's key is left
// untouched; the Context then ends with ErrKeyLost), or when the Lock was
// already unlocked.
//
// If ctx ends first, Unlock returns ctx's error; the release still completes
// in the background.
func (l *Lock) Unlock(ctx context.Context) (err error) {
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
	l.pending.ReleaseAfter() // before the lock is marked asked: transport.Pending
	l.halt()
	v := l.releaseAll(ctx)
	if l.stopped != nil {
		select { // the watchdog returns at once unless a renewal is in flight
		case <-l.stopped:
		case <-ctx.Done():
		}
	}
	switch v.Of(len(l.c.nodes)) {
	case transport.Agreed:
		return nil
	case transport.Refused:
		return l.notHeld()
	default:
		return undecided(v, ctx.Err(), len(l.c.nodes))
	}
}

// releaseAll sends the release to every node and counts the answers that
// came in time. The release raises each node's counter to the fence
// (redlock.go; on one node it is there already). Released on a quorum is
// released: the others' answers are not waited for. They finish in the
// background and still count, so that a verdict they complete ends the
// Context. A node whose acquire had not answered is released once that
// answer has come (transport.Pending).
func (l *Lock) releaseAll(ctx context.Context) transport.Votes {
	if len(l.c.nodes) == 1 {
		r := round[bool, *Lock]{Op: "release", Timeout: l.timeout, By: l, Call: (*Lock).releaseOn, Yes: isYes,
			Late: (*Lock).lateRelease}
		a := r.AskOne(ctx, l.c.work, l.c.nodes[0])
		if !a.Abandoned {
			l.lateRelease(nil, a.V, a.Err)
		}
		return count([]answer[bool]{a}, isYes)
	}
	// Each release is recorded as under way before the round, so that an
	// acquire of the Client's that begins once Unlock has returned finds
	// them all (transport.Flights).
	rs := &releases{l: l, flights: make(map[*node]chan struct{}, len(l.c.nodes))}
	for _, n := range l.c.nodes {
		rs.flights[n] = n.releases.Start(l.names.key)
	}
	b := &transport.Ballot{N: len(l.c.nodes), Decide: func(vd transport.Verdict) { l.gone(vd == transport.Agreed) }}
	answers := round[bool, *releases]{Op: "release", Timeout: l.timeout, By: rs, Call: (*releases).on, Yes: isYes,
		Late: func(_ *releases, _ *node, ok bool, err error) { b.Add(ok, err) },
	}.Ask(nil, ctx, l.c.work, l.c.nodes)
	for _, a := range answers {
		if !a.Abandoned {
			b.Add(a.Err == nil && a.V, a.Err)
		}
	}
	return count(answers, isYes)
}

// lateRelease settles a one-node release from its answer, in time or
// Late: released or found gone ends the lease; an error decides nothing.
// (Several nodes count their answers in a ballot instead.)
func (l *Lock) lateRelease(_ *node, ok bool, err error) {
	if err == nil {
		l.gone(ok)
	}
}

// releases is one Unlock's releases on several nodes, each recorded as
// under way on its node until it has been answered (transport.Flights).
type releases struct {
	l       *Lock
	flights map[*node]chan struct{}
}

// on releases the lock on n, and records the answer. A release that
// failed in a way that may have lost it is tried again (retryRelease).
func (rs *releases) on(ctx context.Context, n *node) (bool, error) {
	defer n.releases.End(rs.l.names.key, rs.flights[n])
	ok, err := rs.l.releaseOn(ctx, n)
	if err != nil && !neverSent(err) {
		rs.l.retryRelease(n, err)
	}
	return ok, err
}

// retryRelease releases the lock on n again, in the background, after
// cause: an error of its release that the release may not have run with
// (a read timeout, on a connection go-redis then closes; an error reply
// such as LOADING), whatever Unlock's verdict. Left alone, the key would
// stay on n for the rest of its TTL, and n refuse every lock of the key
// until then. As releaseUncertain does, it first waits until go-redis is
// done with the request (settled; at most cleanupTimeout), then sends the
// release again uncertainPause after each failure until n answers, for
// cleanupTimeout (and the attempt then under way, which go-redis's read
// timeout bounds); it stops when n cannot be reached (neverSent: a node
// down has nothing to release until it is back) or the Client closes.
// Close waits for an attempt under way, as for any request of the
// Client's. A release is token-checked: whichever of two runs second
// finds nothing, and it only raises the fencing counter.
func (l *Lock) retryRelease(n *node, cause error) {
	l.c.spawn(func() {
		ctx, cancel := context.WithTimeout(l.c.ctx, cleanupTimeout)
		answered := transport.Settled(ctx, cause)
		cancel()
		if answered {
			return
		}
		ctx, cancel = context.WithTimeout(l.c.ctx, cleanupTimeout)
		defer cancel()
		err := cause
		for pause(ctx, nil, uncertainPause); ctx.Err() == nil; pause(ctx, nil, uncertainPause) {
			if _, err = l.c.release(ctx, n, l.names, l.token, l.raise, l.keep, false); err == nil {
				return
			} else if neverSent(err) {
				break
			}
		}
		why := "no answer in time"
		switch {
		case l.c.ctx.Err() != nil:
			why = "the Client was closed first"
		case neverSent(err):
			why = "the node cannot be reached"
		}
		l.c.warn("dlock: could not release the lock on a node ("+why+"); it expires there by its TTL",
			slog.String("key", l.names.key), slog.String("node", n.Name), slog.Any("err", err))
	})
}

// releaseOn releases the lock on node n, once n's acquire has answered.
func (l *Lock) releaseOn(ctx context.Context, n *node) (bool, error) {
	if ch := l.pending.Arrival(n); ch != nil {
		<-ch // bounded: the acquire's request ends with go-redis's timeouts
	}
	return l.c.release(ctx, n, l.names, l.token, l.raise, l.keep, !l.waited.Load())
}

// event is an Event about l: its key, primitive, fence and node count.
func (l *Lock) event(kind EventKind, err error) Event {
	return Event{Kind: kind, Key: l.Key(), Primitive: primitiveOf(l.token), Fence: l.fence, Nodes: len(l.c.nodes), Err: err}
}

// gone records the answer of a release: the lock is no longer held
// either way, but the Context's cause tells whether we released it or found
// it gone.
func (l *Lock) gone(ok bool) {
	l.mu.Lock()
	l.released = true
	then := l.afterRelease
	l.mu.Unlock()
	l.c.gates.freed(l.names.key)
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

// renew extends the lease by ttl (cut at the hold ceiling), one renewal at
// a time, and returns when the successful request was sent.
//
// Once the lease is over, nothing extends the key again: a renewal is not
// sent, and one whose answer came after the lease's end gives the key back
// (someone else may have been told the lock is free; the holder has been
// told it is lost).
func (l *Lock) renew(ctx context.Context, ttl time.Duration) (sent time.Time, err error) {
	h := l.c.hooks.Load()
	ctx, end := l.startSpan(h, ctx, SpanRenew)
	if h != nil {
		defer func() { h.report(l.event(EventRenew, err), end) }()
	}
	slot := l.renewSlot()
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
	answers := round[bool, *Lock]{Op: "extend", Timeout: l.timeout,
		By: l, Call: func(l *Lock, ctx context.Context, n *node) (bool, error) {
			return n.extend(ctx, l.names, l.token, ttl, ttl+l.keep-l.ttl)
		},
		Yes: isYes,
	}.Ask(nil, ctx, l.c.work, l.c.nodes)
	return sent, l.renewalVerdict(ctx, count(answers, isYes), sent, ttl, cut)
}

// renewalVerdict applies the verdict v of a renewal sent at sent for ttl (cut at
// the hold ceiling) to the lease.
func (l *Lock) renewalVerdict(ctx context.Context, v transport.Votes, sent time.Time, ttl time.Duration, cut bool) error {
	switch v.Of(len(l.c.nodes)) {
	case transport.Agreed:
		// Only an extension confirmed within the current validity
		// counts: past it, someone else may have had the lock meanwhile.
		if !time.Now().Before(l.lease.validUntil()) {
			l.lease.over()
			l.giveBack()
			return fmt.Errorf("%w: %q", ErrLeaseExpired, l.Key())
		}
		l.lease.renewed(sent, ttl, cut)
		return nil
	case transport.Refused:
		// If Unlock has begun, it may have deleted the key before this
		// renewal arrived: it, not the renewal, says how the lease ended.
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
	if l.isReleased() {
		return 0, l.notHeld()
	}
	answers := l.c.inspectAll(ctx, l.Key(), l.token, l.timeout, "ttl")
	v, d := holding(answers, l.token)
	switch v.Of(len(l.c.nodes)) {
	case transport.Agreed:
		return d, nil
	case transport.Refused:
		l.lease.end(ErrKeyLost)
		return 0, l.notHeld()
	}
	return 0, undecided(v, ctx.Err(), len(l.c.nodes))
}

// overErr is the error of an Extend or renewal asked for after the lease
// ended: the lock is not held, and the lease's cause says why (unless it
// was released).
func (l *Lock) overErr() error {
	if cause := l.lease.ended(); !errors.Is(cause, ErrReleased) {
		return fmt.Errorf("%w: %q (%w)", ErrNotHeld, l.Key(), cause)
	}
	return l.notHeld()
}

// giveBack releases, in the background, a key this Lock may still hold
// after its lease ended.
func (l *Lock) giveBack() {
	l.halt()
	for _, n := range l.c.nodes {
		l.c.cleanup(func(ctx context.Context) {
			_, _ = l.c.release(ctx, n, l.names, l.token, l.raise, l.keep, !l.waited.Load())
		})
	}
}

func (l *Lock) notHeld() error {
	return fmt.Errorf("%w: %q", ErrNotHeld, l.Key())
}

// asked reports whether anything has been asked of the nodes for this lock
// since it was obtained: a renewal or Extend, or Unlock. Each marks the
// lock before it sends (see lateGiveBack).
func (l *Lock) asked() bool {
	return l.renewed.Load() || l.isHalted()
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	return released
}

// newToken returns 160 random bits from crypto/rand as URL-safe text: the
// Redis guidance asks for about 20 random bytes, unique across all clients
// and all acquisitions. The random part ends with the protocol's version
// tag, "-v1" (protocol.go). A campaign's token also carries the
// candidate's value (election.go); a semaphore permit's or read-write
// hold's starts with its kind (semaphore.go).
//
// The token is put together in a buffer on the stack, so that making it
// costs one allocation: the string.
func newToken(o options) (string, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("dlock: reading random token: %w", err)
	}
	token := append(make([]byte, 0, 64), o.kind...)
	token = base64.RawURLEncoding.AppendEncode(token, b[:])
	token = append(token, versionTag...)
	if o.candidate {
		token = append(token, '.')
		token = base64.RawURLEncoding.AppendEncode(token, []byte(o.value))
	}
	return string(token), nil
}
