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

// A Round is one question put to a set of nodes at once: Call(By, ctx, n)
// for each node n. The asker By and a function of it (a method expression)
// rather than a closure: where one node is asked in the caller's goroutine,
// nothing is then allocated for them.
type Round[T, B any, N Asked] struct {
	Op      string        // what is asked, for errors: "acquire", "release", …
	Timeout time.Duration // how long each answer is waited for (0: until ctx ends)
	By      B
	Call    func(B, context.Context, N) (T, error)
	// Yes, if set, says which answers are a yes: the wait ends as soon as
	// a majority of the nodes asked said yes. Without it, every answer is
	// waited for.
	Yes func(T) bool
	// Late, if set, receives the answers that come after the wait ended,
	// so that their effect can be undone.
	Late func(B, N, T, error)
}

// Ask puts the question to every node in parallel (calls) and appends their
// answers, in order, to dst (a caller asking one node can give it room on
// its stack). A node that has not answered when the wait ends gets its
// Unanswered error and is marked abandoned.
func (r Round[T, B, N]) Ask(dst []Answer[T], ctx context.Context, w *Work, nodes []N) []Answer[T] {
	if len(nodes) == 1 { // the usual case; AwaitOn may spare the goroutine
		return append(dst, r.AskOne(ctx, w, nodes[0]))
	}
	answers := make([]Answer[T], len(nodes))
	ops := make([]func(context.Context) (T, error), len(nodes))
	for i, n := range nodes {
		ops[i] = func(ctx context.Context) (T, error) { return r.Call(r.By, ctx, n) }
	}
	var late func(int, T, error)
	if r.Late != nil {
		late = func(i int, v T, err error) { r.Late(r.By, nodes[i], v, err) }
	}
	cs := startCalls(ctx, w, ops, late)
	got, why := cs.wait(ctx, len(nodes), r.Timeout, r.enough(len(nodes)))
	for i, n := range nodes {
		answers[i] = Answer[T]{Err: n.Unanswered(r.Op, why), Abandoned: true}
	}
	for _, g := range got {
		answers[g.I] = Answer[T]{V: g.V, Err: g.Err}
	}
	return append(dst, answers...)
}

// AskOne puts the question to the one node n (see AwaitOn).
func (r Round[T, B, N]) AskOne(ctx context.Context, w *Work, n N) Answer[T] {
	v, err, left := AwaitOn(ctx, w, n, r.Timeout, r.By, r.Call, r.Late)
	if left {
		err = n.Unanswered(r.Op, err)
	}
	return Answer[T]{V: v, Err: err, Abandoned: left}
}

// enough returns the test that ends a round's wait early: a majority of n
// nodes said yes (nil without Yes).
func (r Round[T, B, N]) enough(n int) func([]Reply[T]) bool {
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
