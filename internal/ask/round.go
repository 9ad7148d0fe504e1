package ask

import (
	"context"
	"time"

	"github.com/dlock-go/dlock/internal/quorum"
)

// Asked is a node a Round puts its question to.
type Asked interface {
	// Unanswered returns the error of op's request left unanswered for
	// err: ctx's error, or ErrNodeTimeout.
	Unanswered(op string, err error) error
}

// Answer is one node's answer in a Round.
type Answer[T any] struct {
	V         T
	Err       error
	Abandoned bool // sent, no answer in time; the round's Late was or will be called with it
}

// A Round is one question put to a set of nodes at once: Call(ctx, n) for
// each node n.
type Round[T any, N Asked] struct {
	Op      string        // what is asked, for errors: "acquire", "release", …
	Timeout time.Duration // how long each answer is waited for (0: until ctx ends)
	Call    func(context.Context, N) (T, error)
	// Yes, if set, says which answers are a yes: the wait ends as soon as
	// a majority of the nodes asked said yes. Without it, every answer is
	// waited for.
	Yes func(T) bool
	// Late, if set, receives the answers that come after the wait ended,
	// so that their effect can be undone.
	Late func(N, T, error)
}

// Ask puts the question to every node in parallel (calls) and returns
// their answers, in order. A node that has not answered when the wait ends
// gets its Unanswered error and is marked abandoned.
func (r Round[T, N]) Ask(ctx context.Context, w *Work, nodes []N) []Answer[T] {
	if len(nodes) == 1 { // the usual case; await may spare the goroutine
		return []Answer[T]{r.AskOne(ctx, w, nodes[0])}
	}
	answers := make([]Answer[T], len(nodes))
	ops := make([]func(context.Context) (T, error), len(nodes))
	for i, n := range nodes {
		ops[i] = func(ctx context.Context) (T, error) { return r.Call(ctx, n) }
	}
	var late func(int, T, error)
	if r.Late != nil {
		late = func(i int, v T, err error) { r.Late(nodes[i], v, err) }
	}
	cs := startCalls(ctx, w, ops, late)
	got, why := cs.wait(ctx, len(nodes), r.Timeout, r.enough(len(nodes)))
	for i, n := range nodes {
		answers[i] = Answer[T]{Err: n.Unanswered(r.Op, why), Abandoned: true}
	}
	for _, g := range got {
		answers[g.I] = Answer[T]{V: g.V, Err: g.Err}
	}
	return answers
}

// AskOne puts the question to the one node n (see await).
func (r Round[T, N]) AskOne(ctx context.Context, w *Work, n N) Answer[T] {
	var late func(T, error)
	if r.Late != nil {
		late = func(v T, err error) { r.Late(n, v, err) }
	}
	v, err, left := await(ctx, w, r.Timeout, func(ctx context.Context) (T, error) { return r.Call(ctx, n) }, late)
	if left {
		err = n.Unanswered(r.Op, err)
	}
	return Answer[T]{V: v, Err: err, Abandoned: left}
}

// enough returns the test that ends a round's wait early: a majority of n
// nodes said yes (nil without Yes).
func (r Round[T, N]) enough(n int) func([]Reply[T]) bool {
	if r.Yes == nil {
		return nil
	}
	need := quorum.Majority(n)
	return func(got []Reply[T]) bool {
		yes := 0
		for _, g := range got {
			if g.Err == nil && r.Yes(g.V) {
				yes++
			}
		}
		return yes >= need
	}
}
