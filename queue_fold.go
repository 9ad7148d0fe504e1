package dlock

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
)

// joinFold is the first joins of a group's deferred waiters, made by the
// release script of the lock they deferred for, before it releases: one
// script run and one request less on the hand-off's path. A waiter the
// release did not join, or may not have, joins itself; a second join is
// harmless (it keeps a queued waiter's place, and confirms a grant).
type joinFold struct {
	g   *waitGroup
	seq int64 // the step the joins are
	ws  []*queuedWaiter
}

// args appends the release script's arguments for the joins.
func (f *joinFold) args(dst []any) []any {
	if f == nil {
		return dst
	}
	dst = append(dst, f.seq)
	for _, w := range f.ws {
		dst = append(dst, w.token, w.o.ttl.Milliseconds(), w.id, w.o.fenceKeep().Milliseconds())
	}
	return dst
}

// answered tells each waiter of f how its join went: scores holds their
// places when the release joined them all, else nil. A waiter that gave up
// meanwhile (foldGone) is made to leave. Nil-safe.
func (f *joinFold) answered(scores []string) {
	if f == nil {
		return
	}
	for i, w := range f.ws {
		w.mu.Lock()
		gone := w.fold == foldGone
		switch {
		case gone:
		case scores != nil:
			w.fold, w.joined, w.score = foldJoined, true, scores[i]
		default:
			w.fold = foldFailed
		}
		w.mu.Unlock()
		if gone {
			f.g.c.spawn(func() { f.g.leave(w.id, w.token, 0) })
			continue
		}
		if scores != nil {
			noteStep(w.o.note, nil, false)
		}
		w.deliver(nil, false, nil)
	}
}

// foldState: where a release's join of a deferred waiter stands (joinFold).
// Guarded by the waiter's mu.
type foldState int8

const (
	foldNone   foldState = iota // not taken by a release: it joins itself
	foldTaken                   // in a release under way
	foldJoined                  // the release's script joined it
	foldFailed                  // the release did not say: it joins itself
	foldGone                    // it gave up while taken: the releaser has it leave
)

// folded waits for the word of the release that makes w's first join and
// returns it: foldJoined (in line), or foldFailed (w joins itself; it may
// be in line). If ctx ends first, or w's node timeout passes, w is marked
// foldGone and the releaser has it leave once answered; if ctx ends after
// the word, the caller leaves. (Without a node timeout go-redis bounds it.)
func (w *queuedWaiter) folded(ctx context.Context, g *waitGroup) (foldState, error) {
	var late <-chan time.Time
	if d := w.o.nodeTimeoutFor(1); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		late = t.C
	}
	var unanswered error
	for {
		w.mu.Lock()
		state := w.fold
		if state == foldTaken && (ctx.Err() != nil || unanswered != nil) {
			state, w.fold = foldGone, foldGone
		}
		w.mu.Unlock()
		switch {
		case state == foldTaken:
		case state == foldGone && ctx.Err() == nil:
			return state, unanswered
		default:
			return state, ctx.Err()
		}
		select {
		case <-w.signal:
		case <-ctx.Done():
		case <-late:
			unanswered = g.n.Unanswered("wait", transport.ErrNodeTimeout)
		}
	}
}

// joinDefer is the longest a waiter defers its first join (deferJoin).
const joinDefer = 2 * time.Millisecond

// deferJoin holds back w's first join while w's group has departingLimit
// departures under way, and while a mutex lock granted through w's group
// holds the key, until that lock's release is about to be sent (releasing)
// or joinDefer has passed; a waiter whose context ends sooner joins at
// once, and one whose context ends while it defers, or whose group's
// keepalive fails, returns the error. The release usually makes the join
// in its script (fold says how: foldNone, no release took it); else the
// waiter joins. Either way it is answered between two critical sections,
// not in the next, whose timers it would delay, Go's poller sleeping whole
// milliseconds (docs/design.md, "Measurements"). Giving up while held back
// leaves nothing to remove: it has not joined.
func (w *queuedWaiter) deferJoin(ctx context.Context, g *waitGroup) (fold foldState, err error) {
	if err := g.departing.Wait(ctx); err != nil {
		return foldNone, err
	}
	d := joinDefer
	if g.c.groups.deferFor > 0 {
		d = g.c.groups.deferFor
	}
	if transport.EndsWithin(ctx, d) || !g.deferring(w) {
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
	if tokens.Shared(w.token) {
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

// holding reports whether a mutex lock granted to g's waiters still holds.
func (g *waitGroup) holding() bool {
	g.mu.Lock()
	l := g.holder
	g.mu.Unlock()
	return l != nil && !l.isReleased() && !l.lease.over()
}

// undefer removes w from the deferred waiters, reporting whether it was
// there: if not, a release took it (joinFold).
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
