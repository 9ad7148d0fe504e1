// Package ask puts one question to a Redis node, or to several at once, and
// waits for every answer (Round). Each call returns by the time its context
// ends: the transport ends a script's wait then, with an error that later
// yields the answer if it comes (transport.Settled), which the protocol
// reads to undo what the script may have done. So no answer arrives after
// its caller has gone, and nothing here calls the protocol back. Work is a
// Client's background work: the count of calls and cleanups Close waits
// for. It knows nothing of locks: the protocol says what to ask and what
// the answers mean.
package ask

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrNodeTimeout is the cause of a call's context when the node did not
// answer within the node timeout (Round.Timeout).
var ErrNodeTimeout = errors.New("no answer within the node timeout")

// Answer is one node's answer in a Round.
type Answer[T any] struct {
	V   T
	Err error
}

// A Round is one question put to a set of nodes at once: Call(By, ctx, n)
// for each node n, on a context that also ends after Timeout (with cause
// ErrNodeTimeout) when Timeout is positive. The asker By and a function of
// it (a method expression) rather than a closure: where one node is asked,
// in the caller's goroutine, nothing is then allocated for them.
type Round[T, B, N any] struct {
	Timeout time.Duration // how long each answer is waited for (0: until ctx ends)
	By      B
	Call    func(B, context.Context, N) (T, error)
}

// Ask puts the question to every node in parallel and appends their
// answers, in order, to dst (a caller asking one node can give it room on
// its stack). It returns once every call has returned.
func (r Round[T, B, N]) Ask(dst []Answer[T], ctx context.Context, nodes []N) []Answer[T] {
	if len(nodes) == 1 { // the usual case: in the caller's goroutine
		v, err := r.call(ctx, nodes[0])
		return append(dst, Answer[T]{V: v, Err: err})
	}
	answers := make([]Answer[T], len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() { answers[i].V, answers[i].Err = r.call(ctx, n) })
	}
	wg.Wait()
	return append(dst, answers...)
}

// call asks n within the round's timeout.
func (r Round[T, B, N]) call(ctx context.Context, n N) (T, error) {
	if r.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.Timeout, ErrNodeTimeout)
		defer cancel()
	}
	return r.Call(r.By, ctx, n)
}
