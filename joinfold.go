package dlock

import (
	"context"
	"time"
)

// joinFold is the first joins of a group's deferred waiters, made by the
// release script of the lock they deferred for (scripts/release.lua),
// before it releases: what their own joins, sent just before the release,
// would have done, in one script run and one request less on the hand-off's
// path. The release's answer tells each waiter how its join went (settle);
// a waiter the release did not join, or may not have (an error, a reply
// without the scores), joins itself, which a join made meanwhile or later
// makes no difference to (a join keeps a queued waiter's place, and
// confirms a grant).
type joinFold struct {
	g   *waitGroup
	seq int64 // the step the joins are
	ws  []*queuedWaiter
}

// args appends the release script's arguments for the joins.
func (f *joinFold) args(dst []any) []any {
	dst = append(dst, f.seq)
	for _, w := range f.ws {
		dst = append(dst, w.token, w.o.ttl.Milliseconds(), w.id, w.o.fenceKeep().Milliseconds())
	}
	return dst
}

// settle tells each waiter of f how its join went: scores holds their
// places, in order, when the release script joined them all, and is nil
// when it did not or may not have. A waiter that gave up meanwhile
// (foldGone) is made to leave, as a waiter whose join was in flight is
// when its answer comes (join). Nil-safe.
func (f *joinFold) settle(scores []string) {
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

// foldState is where a deferred waiter's first join stands when a release
// script makes it (joinFold). Guarded by the waiter's mu.
type foldState int8

const (
	foldNone   foldState = iota // not taken by a release: it joins itself
	foldTaken                   // in a release under way
	foldJoined                  // the release's script joined it
	foldFailed                  // the release did not say: it joins itself
	foldGone                    // it gave up while taken: the releaser has it leave
)

// folded waits for the word of the release that makes w's first join
// (joinFold), and returns it: foldJoined (w is in line), or foldFailed (w
// joins itself; it may be in line already). If ctx ends first, or w's node
// timeout passes (as it would bound w's own join), w is marked foldGone,
// and the releaser has it leave once the release has answered (settle);
// if ctx ends after the word, the caller leaves. (Without a node timeout
// the wait is the releaser's request's, bounded by go-redis's timeouts.)
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
			unanswered = g.n.unanswered("wait", errNodeTimeout)
		}
	}
}

// foldReply splits a release's answer with n joins (joinFold) into the
// release's own answer and the joined waiters' scores; without them (the
// script joined nobody: the key held another kind of lock), scores is nil.
func foldReply(r any, n int) (any, []string) {
	t, ok := r.([]any)
	if !ok || len(t) != 1+n {
		return r, nil
	}
	scores := make([]string, n)
	for i, v := range t[1:] {
		s, ok := v.(string)
		if !ok {
			return t[0], nil
		}
		scores[i] = s
	}
	return t[0], scores
}
