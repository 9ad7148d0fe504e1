package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Waiting in line
//
// On one node (standalone or cluster), a waiter does not poll and is not
// woken with everyone else: it joins a FIFO queue kept in Redis, in the lock
// key's hash slot, ordered by the server's time when it joined (never a
// client clock). The release script deletes the lock and, in the same atomic
// step, sets it to the first live waiter's token and publishes the grant on
// the key's wake channel, naming the waiter (unless the waiter is in the
// releasing Client's own group: that Client has the grant in its reply and
// hands it over itself, handOver). Newcomers (TryLock, or Lock's
// first attempt) cannot jump the line: the acquire scripts refuse a key
// that has a queue, and the lock is never free while someone live waits.
// (The lean acquire of the uncontended path declares no queue key: it
// learns of a queue from the mark that every step of a waiter sets on
// the key's fencing counter, scripts/mark.lua, and leaves a marked key to
// the full acquire.)
//
// A Client's own turn-taking. A waiter whose Client holds the key through
// a grant of its line (a goroutine that locks again right after
// unlocking, while another of its Client's goroutines holds the key)
// defers its join until that holder's release is about to be sent, or
// joinDefer has passed (deferJoin): the release script then makes its
// join, just before it releases (joinfold.go), instead of the join
// landing in the middle of the next critical section. Its place in line
// is its join's, as anyone's: a waiter of another Client that joins
// while it defers goes ahead of it. (The group remembers its holder only
// while the group lasts: once it has retired, groupLinger after its last
// waiter left, nobody defers.)
//
// What a waiter costs. A Client's waiters on one key form a group
// (waitGroup). The group subscribes to the key's wake channel through the
// node's one subscription connection (notify.go), and the subscriber hands
// each grant to the waiter it names; no waiter holds a connection, and the
// user's pool is used only for each waiter's join (one script, unless a
// release makes it) and for the group's keepalive step: one script every
// keepalive period, however many waiters the group has. So waiting costs a Client, per node (per cluster
// master), one pub/sub connection and, briefly, one pooled connection per
// step. A group outlives its last waiter by groupLinger, subscribed and
// without steps, so that goroutines taking turns on a key do not
// subscribe again on every turn.
//
// Liveness. A waiter is alive while its group is: the join and every
// keepalive record the group's sign of life (server time and step
// number), and a waiter whose group has shown none for aliveWindow is dead
// and skipped. A waiter that stops waiting leaves the queue as Lock
// returns: its leave is waited for leaveWait at most (when a step was in
// flight, the leave follows that step's answer), and finishes in work that
// Close waits for; one whose leave failed or is still under way is
// remembered by
// the group, which passes on any grant it is given and tries again at each
// keepalive. If the holder's key expires instead of being released, the
// next keepalive of any group hands the lock to the first in line.
//
// Lost messages. A grant is also recorded in the queue (the grant record),
// and each keepalive reports a grant to one of the group's waiters, so a
// message lost while the subscription reconnects costs at most one
// keepalive period; a roll call every aliveWindow finds waiters that are
// neither queued nor granted (their grant lapsed unseen), which rejoin.
//
// The lease of a hand-off (safety). The release script runs at server
// time Tg, gives the key PX px, and publishes lease = (Tg - Tk) + px, where
// Tk is when the server ran the group's last step, k, on its own clock
// (rounded down). The waiter recorded when it sent step k, Sk, before
// sending it, so Sk <= Tk in real time, and it counts its lease as
// Sk + lease - drift(lease): no later than Tg + px, when the key expires,
// with the drift margin for the clocks' rates over the whole interval.
// This holds however long ago step k was and however late the message
// arrives; a late message only leaves less of the lease.
//
// What a hand-off gives (px). A waiter of the releasing Client's own group
// gets its TTL: its Client is alive, running the release. Any other gets
// a claim, min(TTL, claimTime), so that a waiter that died just before it
// was granted holds the line up for claimTime at most. A waiter granted a
// claim shorter than its TTL joins again before its Lock returns, and that
// join, which shows it alive, gives the key its whole TTL: when Lock
// returns, the key holds the TTL asked for.
//
// Progress (liveness). A grant is never refused for the age of the step
// it counts from. A waiter refuses it only when less than a quarter of
// min(TTL, claimTime) is left; it then joins again at once, keeping its
// score: if the key still holds its token the join gives it its whole TTL
// counted from that join, and if the grant lapsed meanwhile the waiter is
// back at the head of the line.
//
// Redlock does not queue: each node would order its waiters on its own, and
// a release would grant different waiters on different nodes. There,
// waiters are woken by release notifications and retry after a random
// pause (acquire.go); fairness is best-effort.
const (
	aliveWindow = time.Second
	claimTime   = aliveWindow
	// waitStep is the longest keepalive period; a group whose waiters have
	// short TTLs steps more often (keepalivePeriod), so that a hand-off's
	// lease counts from a recent step.
	waitStep = aliveWindow / 3
	// queueKeep is how long the queue's keys outlive the last step.
	queueKeep = 2 * aliveWindow
)

// keepalivePeriod returns how often a group whose shortest TTL is ttl
// steps: five TTLs, at least 20 ms, at most waitStep.
func keepalivePeriod(ttl time.Duration) time.Duration {
	return min(max(5*ttl, 20*time.Millisecond), waitStep)
}

// waitQueued waits in key's queue until the lock is granted or ctx ends.
// It is Lock's path on a single node after a failed first attempt.
func (c *Client) waitQueued(ctx context.Context, nm *lockNames, o options) (*Lock, error) {
	done, ok := c.hold() // Close waits for this call, leave included
	if !ok {
		return nil, notObtained(ErrClosed)
	}
	defer done()
	parent := ctx
	ctx, unbind := c.bind(ctx)
	defer unbind()
	w, err := newQueuedWaiter(o)
	if err != nil {
		return nil, err
	}
	g := c.groups.enter(c, nm, w)
	select { // a grant published before the subscription is caught by a keepalive
	case <-g.ready:
	default:
		t := time.NewTimer(waitStep)
		select {
		case <-g.ready:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	l, err := w.wait(ctx, g)
	if err != nil && ctx.Err() != nil {
		if errors.Is(context.Cause(ctx), ErrClosed) && parent.Err() == nil {
			return nil, notObtained(ErrClosed)
		}
		return nil, notObtained(parent.Err())
	}
	return l, err
}

// queuedWaiter is one Lock call waiting in line. The group delivers to it
// through its mailbox; its own goroutine (in wait) acts on what arrives.
type queuedWaiter struct {
	id, token string
	o         options
	px        time.Duration // what a hand-off gives: min(TTL, claimTime)

	signal chan struct{} // something is in the mailbox
	mu     sync.Mutex    // guards the mailbox and joined
	grant  *handedOff    // the latest grant delivered
	check  bool          // rejoin: a grant lapsed, or the roll call missed it
	err    error         // the group's keepalive failed
	joined bool          // answered a join: the roll call may include it
	score  string        // its place in line, from its first join
	fold   foldState     // its first join's, when a release makes it (joinFold)
}

// handedOff is a grant as the release script published it.
type handedOff struct {
	fence int64
	seq   int64         // the group's step the lease counts from
	lease time.Duration // from the send of step seq
	px    time.Duration // the key's PX from the grant: the TTL, or a shorter claim
}

func newQueuedWaiter(o options) (*queuedWaiter, error) {
	token, err := newToken(o)
	if err != nil {
		return nil, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	return &queuedWaiter{
		id: hex.EncodeToString(id[:]), token: token, o: o,
		px: min(o.ttl, claimTime), signal: make(chan struct{}, 1), score: "0",
	}, nil
}

// deliver puts a grant, a request to rejoin, or an error in the mailbox.
// Called by the group, never blocking.
func (w *queuedWaiter) deliver(h *handedOff, check bool, err error) {
	w.mu.Lock()
	if h != nil {
		w.grant = h
	}
	w.check = w.check || check
	if err != nil && w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *queuedWaiter) take() (h *handedOff, check bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, check, err = w.grant, w.check, w.err
	w.grant, w.check, w.err = nil, false, nil
	return h, check, err
}

// wait joins the queue and waits for the grant. Whenever it returns without
// the lock, the waiter has left the queue (or its leave is under way after
// a step still in flight, or remembered by the group).
func (w *queuedWaiter) wait(ctx context.Context, g *waitGroup) (*Lock, error) {
	fold, err := w.deferJoin(ctx, g)
	if err != nil {
		// Nothing to leave if it never joined, or gave up while a release
		// joined it (that releaser has it leave); else it is in line, or
		// may be (a release that failed may have joined it).
		g.exit(w, fold == foldJoined || fold == foldFailed)
		return nil, err
	}
	check := fold != foldJoined // the first join, unless a release made it
	if !check {
		w.deliver(nil, false, nil) // look: the release's grant may be in the mailbox already
	}
	for {
		if check {
			l, err, inFlight := g.join(ctx, w)
			if errors.Is(err, errGrantLapsed) {
				continue // check stays true: join again
			}
			if l != nil || err != nil {
				g.exit(w, l == nil && !inFlight)
				return l, err
			}
		}
		select {
		case <-w.signal:
		case <-ctx.Done():
			g.exit(w, true)
			return nil, ctx.Err()
		}
		var l *Lock
		if l, check, err = w.received(g); l != nil || err != nil {
			g.exit(w, err != nil)
			return l, err
		}
	}
}

// received acts on what is in w's mailbox: the lock, from a grant with
// enough of its lease left; an error (the group's keepalive failed); or
// check, w must join again (a rejoin was asked for, or a grant had too
// little left to use: the join confirms it, or gets w back in line).
func (w *queuedWaiter) received(g *waitGroup) (l *Lock, check bool, err error) {
	h, check, err := w.take()
	if err != nil || h == nil {
		return nil, check, err
	}
	if l := g.accept(w, h); l != nil {
		return l, false, nil
	}
	return nil, true, nil
}

// waitGroup is a Client's waiters on one key: it owns their subscription
// to the wake channel, their keepalive step and the log of when each step
// was sent.
type waitGroup struct {
	c     *Client
	n     *node
	nm    *lockNames
	id    string          // this group's name in the queue
	ready <-chan struct{} // closed once the wake channel is subscribed
	watch *watch

	mu       sync.Mutex
	waiters  map[string]*queuedWaiter
	departed map[string]string // id -> token: gone, leave not yet confirmed
	seq      int64
	sent     []stepSent      // recent steps, in seq order
	emptied  chan struct{}   // the last waiter has gone (see groupLinger)
	holder   *Lock           // the mutex lock last granted to one of its waiters, until released
	deferred []*queuedWaiter // waiters deferring their first join (deferJoin)
	idle     time.Time       // since when the group has had no waiter; zero while it has
	stopped  bool
}

// groupLinger is how long a group stays, subscribed and without a step,
// after its last waiter has gone, for the Client's next waiter on the key:
// two goroutines taking turns on a key would otherwise unsubscribe and
// subscribe again, and wait for the subscription, on every turn.
const groupLinger = 100 * time.Millisecond

type stepSent struct {
	seq int64
	at  time.Time
}

// groups is a Client's wait groups, by key.
type groups struct {
	mu sync.Mutex
	m  map[string]*waitGroup
	// n is len(m), written under mu: releasing reads it without mu, so
	// that a Client with no waiters (the uncontended case) takes no lock
	// and looks nothing up per release.
	n atomic.Int32
	// deferFor, when set (by a test, before any call), stands in for
	// joinDefer.
	deferFor time.Duration
}

// waiting reports whether the Client has waiters on key, or holds it
// through a grant to one of them. (As releasing, it looks nothing up
// when the Client has no group.)
func (gs *groups) waiting(key string) bool {
	if gs.n.Load() == 0 {
		return false
	}
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g == nil {
		return false
	}
	g.mu.Lock()
	n := len(g.waiters)
	g.mu.Unlock()
	return n > 0 || g.holding()
}

// releasing is told that the Client is about to release its lock on key
// with token: it returns the name of the Client's group waiting for key,
// or "", and, if that lock is the one the group holds the key through,
// the group's deferred waiters (deferJoin), whose first joins the release
// script makes (joinFold), or nil if there are none.
//
// With no group at all it looks nothing up: a group started meanwhile,
// which n does not show yet, is one started after the lookup would have
// been made, which a release must cope with anyway.
func (gs *groups) releasing(key, token string) (group string, f *joinFold) {
	if gs.n.Load() == 0 {
		return "", nil
	}
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g == nil {
		return "", nil
	}
	g.mu.Lock()
	if g.holder == nil || g.holder.token != token {
		g.mu.Unlock()
		return g.id, nil
	}
	deferred := g.deferred
	g.holder, g.deferred = nil, nil
	for _, w := range deferred {
		w.mu.Lock()
		w.fold = foldTaken // under g.mu: undefer sees it taken or not at all
		w.mu.Unlock()
		if w.o.hasNodeTimeout {
			w.deliver(nil, false, nil) // its wait for the release starts now (folded)
		}
	}
	g.mu.Unlock()
	if len(deferred) == 0 {
		return g.id, nil
	}
	seq, _ := g.stamp() // before the release is sent: its lease counts from here
	return g.id, &joinFold{g: g, seq: seq, ws: deferred}
}

// joinDefer is the longest a waiter defers its first join (deferJoin).
const joinDefer = 2 * time.Millisecond

// deferJoin holds back w's first join while a mutex lock granted through
// w's group holds the key, until that lock's release is about to be sent
// (releasing) or joinDefer has passed; a waiter whose context ends sooner
// joins at once, and one whose context ends while it defers, or whose
// group's keepalive fails, returns the error. The release usually makes
// the join itself, in its script, before it releases (joinFold): fold
// says how that went (foldNone: no release took it; see folded);
// otherwise the waiter joins. Either way both
// answers come back together, between two critical sections. On a
// hot key, a goroutine that locks again right after unlocking would
// otherwise have its join answered while the next holder runs, and Go's
// network poller sleeps in whole milliseconds (a shorter wait is rounded
// up to 1 ms, runtime/netpoll_epoll.go): that answer made a holder's 1-ms
// sleep end about as much later as the answer came after the sleep began
// (16 goroutines on one Client: 1.24 ms per 1-ms sleep, 1.12 ms deferred).
// The waiter's place in line is its join's, as anyone's; it has not
// joined while it defers, so giving up then leaves nothing to remove.
func (w *queuedWaiter) deferJoin(ctx context.Context, g *waitGroup) (fold foldState, err error) {
	d := joinDefer
	if g.c.groups.deferFor > 0 {
		d = g.c.groups.deferFor
	}
	if endsWithin(ctx, d) || !g.deferring(w) {
		return foldNone, nil // a context that ends first gets a join, not a wait
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.signal:
	case <-t.C:
	case <-ctx.Done():
	}
	if g.undefer(w) { // not taken by a release: it joins itself, or gives up
		if err := ctx.Err(); err != nil {
			return foldNone, err
		}
		_, _, err := w.take() // a keepalive's failure, if any (no grant: not in line)
		return foldNone, err
	}
	return w.folded(ctx, g)
}

// deferring reports whether w defers its first join, and records it if so.
func (g *waitGroup) deferring(w *queuedWaiter) bool {
	if shared(w.token) {
		return false
	}
	if !g.holding() {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holder == nil { // its release began meanwhile
		return false
	}
	g.deferred = append(g.deferred, w)
	return true
}

// holding reports whether a mutex lock granted to one of the group's
// waiters still holds the key, as far as this process knows (its Unlock
// has not begun, and its lease has not run out).
func (g *waitGroup) holding() bool {
	g.mu.Lock()
	l := g.holder
	g.mu.Unlock()
	return l != nil && !l.isReleased() && !l.lease.over()
}

// undefer removes w from the deferred waiters, and reports whether it was
// still there: if not, a release has taken it (joinFold).
func (g *waitGroup) undefer(w *queuedWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, d := range g.deferred {
		if d == w {
			g.deferred = append(g.deferred[:i], g.deferred[i+1:]...)
			return true
		}
	}
	return false
}

// held records l, granted to one of the group's waiters, as its holder.
func (g *waitGroup) held(l *Lock) *Lock {
	if l != nil && !shared(l.token) {
		g.mu.Lock()
		g.holder = l
		g.mu.Unlock()
	}
	return l
}

// enter adds w to the Client's group for nm's key, starting the group if
// there is none.
func (gs *groups) enter(c *Client, nm *lockNames, w *queuedWaiter) *waitGroup {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[nm.key]
	if g == nil {
		g = newWaitGroup(c, nm)
		if gs.m == nil {
			gs.m = map[string]*waitGroup{}
		}
		gs.m[nm.key] = g
		gs.n.Store(int32(len(gs.m)))
	}
	g.mu.Lock()
	g.waiters[w.id] = w
	g.idle = time.Time{}
	g.mu.Unlock()
	return g
}

func newWaitGroup(c *Client, nm *lockNames) *waitGroup {
	var id [8]byte
	_, _ = rand.Read(id[:])
	g := &waitGroup{
		c: c, n: c.nodes[0], nm: nm, id: hex.EncodeToString(id[:]),
		waiters: map[string]*queuedWaiter{}, departed: map[string]string{},
		emptied: make(chan struct{}, 1),
	}
	g.watch, g.ready = g.n.sub.watch(nm.wake, g.message)
	c.spawn(g.keepalive)
	return g
}

// stamp numbers a step and records when it is sent (just before it is).
func (g *waitGroup) stamp() (int64, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	now := time.Now()
	for len(g.sent) > 0 && now.Sub(g.sent[0].at) > 3*aliveWindow {
		g.sent = g.sent[1:]
	}
	g.sent = append(g.sent, stepSent{g.seq, now})
	return g.seq, now
}

// sentAt returns when step seq was sent, if it is still in the log (a
// grant names a step at most aliveWindow older than the grant).
func (g *waitGroup) sentAt(seq int64) (time.Time, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	i := sort.Search(len(g.sent), func(i int) bool { return g.sent[i].seq >= seq })
	if i < len(g.sent) && g.sent[i].seq == seq {
		return g.sent[i].at, true
	}
	return time.Time{}, false
}

// join runs the join script for w: its first join, or a rejoin that keeps
// its place (and confirms a grant that came too late). It returns the lock
// when granted, or an error; inFlight reports that the step was left
// unanswered (ctx ended, or the node timeout), in which case the step's
// answer is followed by w's leave.
func (g *waitGroup) join(ctx context.Context, w *queuedWaiter) (l *Lock, err error, inFlight bool) {
	if err := ctx.Err(); err != nil { // nothing sent: nothing to follow
		return nil, err, false
	}
	w.mu.Lock()
	score := w.score
	w.mu.Unlock()
	seq, sent := g.stamp()
	r, err, left := await(ctx, g.c, w.o.nodeTimeoutFor(1),
		func(ctx context.Context) (joinReply, error) { return g.n.join(ctx, g.nm, w, g.id, seq, score) },
		func(joinReply, error) { g.leave(w.id, w.token, 0) })
	noteStep(w.o.note, err, left)
	switch {
	case left:
		return nil, g.n.unanswered("wait", err), true
	case err != nil:
		return nil, err, false
	case r.granted && !time.Now().Before(validUntil(sent, r.px)):
		// Granted, but the answer came after the lease it gives was over
		// (a round trip longer than the TTL, less the drift margin): the
		// key may already be someone else's. As for a first attempt
		// (judge), such a grant is not a lock. The caller joins again,
		// which confirms the grant with a fresh lease, or passes it on
		// when the caller gives up (leave.lua).
		return nil, errGrantLapsed, false
	case r.granted:
		return g.held(newLock(g.c, g.nm, w.token, r.fence, w.o, sent, r.px)), nil, false
	}
	w.mu.Lock()
	w.joined = true
	if w.score == "0" {
		w.score = r.score
	}
	w.mu.Unlock()
	return nil, nil, false
}

// errGrantLapsed is join's error for a grant whose lease was over when its
// answer came: the waiter joins again (wait).
var errGrantLapsed = errors.New("the grant's lease was over when its answer came")

// accept turns a grant delivered to w into its Lock, or returns nil when
// w must join again first: the grant is a claim shorter than w's TTL
// (join gives the whole TTL, so that the key holds what Lock was asked
// for when it returns), too little of the lease is left to use (less than
// a quarter of what a hand-off gives), or its step is no longer known.
func (g *waitGroup) accept(w *queuedWaiter, h *handedOff) *Lock {
	if h.px < w.o.ttl {
		return nil
	}
	from, ok := g.sentAt(h.seq)
	if !ok || time.Until(validUntil(from, h.lease)) < w.px/4 {
		return nil
	}
	return g.held(newLock(g.c, g.nm, w.token, h.fence, w.o, from, h.lease))
}

// leaveWait is how long a waiter that gives up waits for its leave's
// answer before Lock returns: enough for a server that answers at all, so
// that a release right after Lock returned meets a queue without it; not
// so long that Lock outlasts its context by more than a moment when the
// server has stalled. A leave still running then finishes in the
// background, in work that Close waits for, and until it lands a grant to
// the departed waiter is passed on by its group.
const leaveWait = 50 * time.Millisecond

// exit takes w out of the group; leave says whether its leave must be sent
// now (it has not been granted, and no step of its is in flight).
func (g *waitGroup) exit(w *queuedWaiter, leave bool) {
	g.mu.Lock()
	delete(g.waiters, w.id)
	if leave {
		g.departed[w.id] = w.token
	}
	g.mu.Unlock()
	if leave {
		wait := leaveWait
		if w.o.hasNodeTimeout {
			wait = min(wait, w.o.nodeTimeout)
		}
		// Also while Close runs: it waits for this call (waitQueued
		// holds it), so a leave still in flight then was spawned as work
		// Close waits for, and the caller returns with its context.
		g.leave(w.id, w.token, wait)
	}
	g.c.groups.release(g)
}

// leave sends the leave script for a departed waiter; once the server has
// it, the group forgets the waiter. It waits for the answer at most
// timeout (none if 0); a leave still running then finishes in the
// background.
func (g *waitGroup) leave(id, token string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err, left := await(ctx, g.c, timeout,
		func(ctx context.Context) (bool, error) { return g.n.leave(ctx, g.nm, token, id) },
		func(_ bool, err error) { g.left(id, token, err) })
	if !left {
		g.left(id, token, err)
	}
}

// left records the answer to a leave: a failed one is tried again.
func (g *waitGroup) left(id, token string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err == nil {
		delete(g.departed, id)
		return
	}
	g.departed[id] = token
	g.c.warn("dlock: a waiter that gave up could not leave the queue; retrying while its Client waits for the key",
		slog.String("key", g.nm.key), slog.Any("err", err))
}

// release tells the group's keepalive that its last waiter has gone: the
// group stops groupLinger later unless a waiter comes meanwhile (retire).
func (gs *groups) release(g *waitGroup) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) > 0 || g.stopped {
		return
	}
	g.idle = time.Now()
	select {
	case g.emptied <- struct{}{}:
	default:
	}
}

// retire stops the group if it has had no waiter for groupLinger, and
// reports whether it did; otherwise, if it has none, it returns how much
// longer it lingers (0 while it has waiters). A group that is stopped is
// out of the map, so the next waiter starts a new one.
func (gs *groups) retire(g *waitGroup) (stopped bool, lingers time.Duration) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.waiters) > 0 || g.idle.IsZero() {
		return false, 0
	}
	if left := groupLinger - time.Since(g.idle); left > 0 {
		return false, left
	}
	g.stopped = true
	if gs.m[g.nm.key] == g {
		delete(gs.m, g.nm.key)
		gs.n.Store(int32(len(gs.m)))
	}
	return true, 0
}

// handOver delivers the grant of a release this Client made, as its reply
// told it, to the waiter it went to if that waiter is this Client's: the
// waiter need not wait for the message to come round through the
// subscription. A release that names the Client's group (releasing) is not
// published at all when it goes to that group's waiter, so the reply is
// its only message; should the reply be lost, the group's keepalive finds
// the grant (its record, '!'), as it finds one whose message was lost.
// Grants to other Clients' waiters are theirs to hear.
func (gs *groups) handOver(key, msg string) {
	gs.mu.Lock()
	g := gs.m[key]
	gs.mu.Unlock()
	if g != nil {
		g.message(msg)
	}
}

// message receives a message of the wake channel (from the subscriber's
// goroutine; it must not block): a grant to one of the group's waiters is
// delivered, one to a waiter that has gone is passed on.
func (g *waitGroup) message(payload string) {
	id, h, ok := parseGrant(payload)
	if !ok {
		return
	}
	g.mu.Lock()
	w := g.waiters[id]
	token, gone := g.departed[id]
	g.mu.Unlock()
	switch {
	case w != nil:
		w.deliver(h, false, nil)
	case gone:
		g.c.spawn(func() { g.leave(id, token, 0) })
	}
}

// parseGrant reads a hand-off message: "g id fence seq lease_ms px_ms". (It
// runs on a hand-off's path, between the release's answer and the next
// holder's wake: fields and strconv, not fmt.Sscanf, which took several
// microseconds.)
func parseGrant(payload string) (id string, h *handedOff, ok bool) {
	f := strings.Fields(payload)
	if len(f) != 6 || f[0] != "g" {
		return "", nil, false
	}
	fence, err1 := strconv.ParseInt(f[2], 10, 64)
	seq, err2 := strconv.ParseInt(f[3], 10, 64)
	lease, err3 := strconv.ParseInt(f[4], 10, 64)
	px, err4 := strconv.ParseInt(f[5], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || fence <= 0 {
		return "", nil, false
	}
	return f[1], &handedOff{fence: fence, seq: seq,
		lease: time.Duration(lease) * time.Millisecond, px: time.Duration(px) * time.Millisecond}, true
}

// keepalive runs the group's keepalive step until the group retires (no
// waiter for groupLinger) or the Client closes.
func (g *waitGroup) keepalive() {
	defer g.watch.cancel()
	t := time.NewTimer(g.period())
	defer t.Stop()
	lastRoll := time.Now()
	for {
		timed := false
		select {
		case <-t.C:
			timed = true
		case <-g.emptied:
		case <-g.c.done:
			return
		}
		switch stopped, lingers := g.c.groups.retire(g); {
		case stopped:
			return
		case lingers > 0: // no waiter: no step
			t.Reset(lingers)
			continue
		case !timed: // a waiter came back before the timer
			continue
		}
		var roll []string
		if time.Since(lastRoll) >= aliveWindow {
			roll, lastRoll = g.rollCall(), time.Now()
		}
		g.step(roll)
		t.Reset(g.period())
	}
}

// period is the keepalive period for the group's shortest TTL.
func (g *waitGroup) period() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	ttl := claimTime
	for _, w := range g.waiters {
		ttl = min(ttl, w.o.ttl)
	}
	return keepalivePeriod(ttl)
}

// rollCall lists the waiters whose join has been answered.
func (g *waitGroup) rollCall() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ids []string
	for id, w := range g.waiters {
		w.mu.Lock()
		if w.joined {
			ids = append(ids, id)
		}
		w.mu.Unlock()
	}
	return ids
}

// step runs one keepalive and acts on its report; it also retries the
// leaves that failed.
func (g *waitGroup) step(roll []string) {
	timeout := g.nodeTimeout()
	seq, _ := g.stamp()
	r, err, left := await(g.c.ctx, g.c, timeout, func(ctx context.Context) (keepaliveReply, error) {
		ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
		defer cancel()
		return g.n.keepalive(ctx, g.nm, g.id, seq, roll)
	}, nil)
	if left {
		err = g.n.unanswered("wait", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.stepFailed(err)
		return
	}
	g.reported(r)
	for id, token := range g.departed {
		g.c.spawn(func() { g.leave(id, token, 0) })
	}
}

// stepFailed ends the waits that a keepalive's failure, err, ends: every
// one, unless err is a timeout, which ends only the waits bounded by a
// node timeout; none once the Client is closing. g.mu is held.
func (g *waitGroup) stepFailed(err error) {
	if g.c.ctx.Err() != nil {
		return
	}
	slow := isSlow(err)
	for _, w := range g.waiters {
		if !slow || w.o.hasNodeTimeout {
			w.deliver(nil, false, err)
		}
	}
}

// reported acts on a keepalive's report r: it delivers a grant to the
// waiter it names, and sends back to the queue a waiter whose grant lapsed
// unseen and those the queue is missing. g.mu is held.
func (g *waitGroup) reported(r keepaliveReply) {
	if w := g.waiters[r.grantTo]; r.grantTo != "" && w != nil {
		if r.held {
			w.deliver(&r.grant, false, nil)
		} else {
			w.deliver(nil, true, nil) // rejoin
		}
	}
	for _, id := range r.missing {
		if w := g.waiters[id]; w != nil {
			w.deliver(nil, true, nil)
		}
	}
}

// nodeTimeout is the keepalive's bound: the shortest node timeout among the
// waiters that set one, or none.
func (g *waitGroup) nodeTimeout() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	var d time.Duration
	for _, w := range g.waiters {
		if w.o.hasNodeTimeout && (d == 0 || w.o.nodeTimeout < d) {
			d = w.o.nodeTimeout
		}
	}
	return d
}

// joinReply is the join script's answer.
type joinReply struct {
	granted bool
	fence   int64
	px      time.Duration // when granted: the key's PX, counted from the join
	score   string        // when queued: the waiter's place
}

// join runs the join script (scripts/join.lua).
func (n *node) join(ctx context.Context, nm *lockNames, w *queuedWaiter, group string, seq int64, score string) (joinReply, error) {
	res, err := n.script(ctx, joinScript, nm.queueKeys(), w.token, w.o.ttl.Milliseconds(), w.id, group, seq, score, n.publish(), nm.wake, w.o.fenceKeep().Milliseconds()).Slice()
	if err != nil {
		return joinReply{}, n.fail("wait", err)
	}
	if len(res) != 3 {
		return joinReply{}, n.fail("wait", errors.New("unexpected reply from the join script"))
	}
	if ok, _ := res[0].(int64); ok != 1 {
		s, _ := res[2].(string)
		return joinReply{score: s}, nil
	}
	fence, err := parseFence(res[1])
	if err != nil {
		return joinReply{}, n.fail("wait", err)
	}
	px, _ := res[2].(int64)
	if px <= 0 {
		return joinReply{}, n.fail("wait", fmt.Errorf("unexpected grant expiry %d from the join script", px))
	}
	return joinReply{granted: true, fence: fence, px: time.Duration(px) * time.Millisecond}, nil
}

// keepaliveReply is the keepalive script's report.
type keepaliveReply struct {
	grantTo string // a waiter of the group the last hand-off went to
	held    bool   // the key still holds that waiter's token
	grant   handedOff
	missing []string // roll call ids neither queued nor granted
}

// keepalive runs the keepalive script (scripts/keepalive.lua).
func (n *node) keepalive(ctx context.Context, nm *lockNames, group string, seq int64, roll []string) (keepaliveReply, error) {
	args := make([]any, 0, 4+len(roll))
	args = append(args, group, seq, n.publish(), nm.wake)
	for _, id := range roll {
		args = append(args, id)
	}
	res, err := n.script(ctx, keepaliveScript, nm.queueKeys(), args...).Slice()
	if err != nil {
		return keepaliveReply{}, n.fail("wait", err)
	}
	var r keepaliveReply
	if len(res) != 2 {
		return r, n.fail("wait", errors.New("unexpected reply from the keepalive script"))
	}
	if g, _ := res[0].([]any); len(g) == 6 {
		r.grantTo, _ = g[0].(string)
		held, _ := g[1].(int64)
		r.held = held == 1
		fence, _ := g[2].(string)
		r.grant.fence, _ = strconv.ParseInt(fence, 10, 64)
		r.grant.seq, _ = g[3].(int64)
		lease, _ := g[4].(int64)
		r.grant.lease = time.Duration(lease) * time.Millisecond
		px, _ := g[5].(int64)
		r.grant.px = time.Duration(px) * time.Millisecond
	}
	missing, _ := res[1].([]any)
	for _, m := range missing {
		if id, ok := m.(string); ok {
			r.missing = append(r.missing, id)
		}
	}
	return r, nil
}

// leave takes a waiter out of the queue; if it had been granted the lock
// meanwhile, the lock goes on to the next waiter. It reports whether it had.
func (n *node) leave(ctx context.Context, nm *lockNames, token, id string) (bool, error) {
	v, err := n.script(ctx, leaveScript, nm.queueKeys(), token, id, n.publish(), nm.wake).Int64()
	if err != nil {
		return false, n.fail("leave", err)
	}
	return v == 1, nil
}
