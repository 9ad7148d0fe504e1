// Package ask puts one question to a Redis node, or to several at once, and
// waits for the answers (Round); an answer that comes after the
// caller stopped waiting goes to the protocol's late handler, which can
// undo its effect. Work is a Client's background work: the goroutines
// those calls run on and the count of calls Close waits for. It knows
// nothing of locks nor of the transport: the protocol says what to ask and
// what the answers mean.
package ask

import (
	"context"
	"sync"
	"time"
)

// ErrNodeTimeout is a node's error when it did not answer within the
// node timeout (see calls.wait). It is a timeout (net.Error), as a read
// timeout is: the node may be gone (internal/transport's Refresh).
var ErrNodeTimeout error = nodeTimeout{}

// nodeTimeout is ErrNodeTimeout's type.
type nodeTimeout struct{}

func (nodeTimeout) Error() string   { return "no answer within the node timeout" }
func (nodeTimeout) Timeout() bool   { return true }
func (nodeTimeout) Temporary() bool { return true }

// Answers that come after the caller has gone
//
// go-redis ignores context deadlines unless the client was built with
// ContextTimeoutEnabled, and even then cannot take back a command the server
// has already run. So every request whose caller's context can end runs in
// its own goroutine, owned by the Client (Close waits for it), on a
// context that keeps the caller's values but not its cancellation, and
// always runs to completion (bounded by the go-redis client's own
// timeouts). The caller waits for the
// answers until its context ends, a timeout passes, or it has heard enough.
//
// Each answer then goes to exactly one place: to the caller, if it was
// still waiting, or else to a late callback, which can undo the request's
// effect (a lock the server granted after the caller gave up is released
// instead of blocking everyone for a TTL). calls is that protocol, written
// once: a request claims the caller under mu, or finds it gone. A call
// whose wait nothing can end early (a context that never ends, no
// timeout) runs in its caller's goroutine (await).

// calls is a set of requests in flight, numbered from 0.
type calls[T any] struct {
	mu      sync.Mutex
	over    bool          // the caller stopped waiting: answers go to late
	replies chan Reply[T] // answers for the caller (one slot per request)
	late    func(i int, v T, err error)
}

// Reply is request i's answer.
type Reply[T any] struct {
	I   int // the request's number
	V   T
	Err error
}

// startCalls sends each op in its own goroutine. Answers that come after
// the caller stopped waiting go to late, if not nil.
func startCalls[T any](ctx context.Context, w *Work, ops []func(context.Context) (T, error), late func(i int, v T, err error)) *calls[T] {
	cs := &calls[T]{replies: make(chan Reply[T], len(ops)), late: late}
	bg := context.WithoutCancel(ctx)
	for i, op := range ops {
		w.Spawn(func() {
			v, err := op(bg)
			if !cs.claim(Reply[T]{i, v, err}) && cs.late != nil {
				cs.late(i, v, err)
			}
		})
	}
	return cs
}

// claim hands r to the caller, or reports that the caller has gone.
func (cs *calls[T]) claim(r Reply[T]) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.over {
		return false
	}
	cs.replies <- r // never blocks: one slot per request
	return true
}

// Wait collects answers, in the order they come, until all n are in or
// enough (if not nil) says that the answers so far suffice; or until ctx
// ends or timeout (if positive) passes, in which case why is ctx's error or
// ErrNodeTimeout. The answers not collected go to late.
func (cs *calls[T]) wait(ctx context.Context, n int, timeout time.Duration, enough func([]Reply[T]) bool) (got []Reply[T], why error) {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for len(got) < n && why == nil {
		select {
		case r := <-cs.replies:
			got = append(got, r)
			if enough != nil && enough(got) {
				return cs.abandon(got), nil
			}
		case <-deadline:
			why = ErrNodeTimeout
		case <-ctx.Done():
			why = ctx.Err()
		}
	}
	return cs.abandon(got), why
}

// abandon stops the wait: answers already delivered are added to got, and
// every later one goes to late.
func (cs *calls[T]) abandon(got []Reply[T]) []Reply[T] {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.over = true
	for len(cs.replies) > 0 {
		got = append(got, <-cs.replies)
	}
	return got
}

// await runs op and returns its answer, waiting for it until ctx ends or
// timeout (if positive) passes. left reports that the wait ended first:
// err is then ctx's error or ErrNodeTimeout, and late (if not nil)
// receives op's answer when it comes. op is sent even when ctx has already
// ended (a release must still happen); callers that should not send then
// check ctx first.
//
// When nothing can end the wait early (ctx never ends, no timeout), op
// runs in the caller's goroutine.
func await[T any](ctx context.Context, w *Work, timeout time.Duration, op func(context.Context) (T, error), late func(T, error)) (v T, err error, left bool) {
	if ctx.Done() == nil && timeout <= 0 {
		v, err = op(ctx)
		return v, err, false
	}
	var lateI func(int, T, error)
	if late != nil {
		lateI = func(_ int, v T, err error) { late(v, err) }
	}
	cs := startCalls(ctx, w, []func(context.Context) (T, error){op}, lateI)
	got, why := cs.wait(ctx, 1, timeout, nil)
	if len(got) == 1 {
		return got[0].V, got[0].Err, false
	}
	return v, why, true
}
