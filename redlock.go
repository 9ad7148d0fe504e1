package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
)

// Redlock
//
// A Client over N independent masters runs the Redlock algorithm of the
// Redis guidance (docs/redlock.md); one node is a quorum of one, through
// the same code. The time is noted, the same key and token sent to every
// node at once, each answer bounded by the node timeout; the lock is
// obtained when a majority granted it within the TTL, valid for TTL -
// elapsed - drift (lease.go). A grant that comes after the majority joins
// the lock (attempt.late); a failed attempt is released on every node that
// may have granted it. Extend and Unlock return once a majority said yes.
//
// Fences across nodes. Each node's acquire script issues its own fence
// (fence.go); a Redlock grant's fence is the maximum over the nodes that
// granted it. A later grant must not come out lower. Any two majorities share
// a node, x: the later holder won x either after our lock on x was released,
// or after it expired there.
//   - Released: the release script raises x's counter to at least our fence,
//     atomically with the delete. Whoever wins x next gets at least fence+1
//     from x, so the maximum over its majority is above ours.
//   - Expired: our key on x lived a full TTL on x's clock, and our grant was
//     decided within the TTL of our first send, so the later grant on x
//     happens at least (validity) after we saw every fence of ours. The
//     later fence is at least x's clock in microseconds (the hybrid counter),
//     which is above ours as long as the nodes' clocks differ by less than
//     the lock's validity (seconds for the default 30 s TTL).
// A node that loses its data (restart without persistence) falls under the
// second case: its counter restarts from its clock. The Redis guidance's
// restart rule applies too: a node without persistence must stay down for
// longer than the longest TTL before rejoining, or a lock it forgot could be
// granted twice.

// DefaultNodeTimeout is how long a Redlock Client waits for each node's
// answer when WithNodeTimeout is not given (but at most a tenth of the TTL).
// A single-node Client has no per-node timeout unless one is given; there,
// the context bounds the call.
const DefaultNodeTimeout = 50 * time.Millisecond

// nodeTimeoutFor returns the per-node timeout for a Client of n nodes
// (0: none).
func (o options) nodeTimeoutFor(n int) time.Duration {
	switch {
	case o.hasNodeTimeout:
		return o.nodeTimeout
	case n == 1:
		return 0
	}
	return min(DefaultNodeTimeout, o.ttl/10)
}

// answer is one node's answer in a round.
type answer[T any] struct {
	v         T
	err       error
	abandoned bool // sent, no answer in time; the round's late was or will be called with it
}

// A round is one question put to a set of nodes at once: call(by, ctx, n)
// for each node n. The asker by and a function of it (a method
// expression) rather than a closure or method value: where one node is
// asked in the caller's goroutine, the uncontended path, nothing is then
// allocated for them (a method value costs an allocation each time).
type round[T, B any] struct {
	op      string        // what is asked, for errors: "acquire", "release", …
	timeout time.Duration // how long each answer is waited for (0: until ctx ends)
	by      B
	call    func(B, context.Context, *node) (T, error)
	// yes, if set, says which answers are a yes: the wait ends as soon as
	// a majority of the nodes asked said yes. Without it, every answer is
	// waited for.
	yes func(T) bool
	// late, if set, receives the answers that come after the wait ended,
	// so that their effect can be undone.
	late func(B, *node, T, error)
	// lateTakesError says that late handles an error (one that may hide
	// an answer) as safely as the answer itself, so that on one node the
	// call may wait in the caller's goroutine (transport.AwaitOn).
	lateTakesError bool
}

// ask puts the question to every node in nodes in parallel (transport.Calls) and
// appends their answers, in order, to dst (a caller asking one node can
// give it room for the answer on its stack). A node that has not answered
// when the wait ends gets an error, ctx's or a *NodeError for the timeout,
// and is marked abandoned.
func (r round[T, B]) ask(dst []answer[T], ctx context.Context, c *Client, nodes []*node) []answer[T] {
	if len(nodes) == 1 { // the usual case; await may spare the goroutine
		return append(dst, r.askOne(ctx, c, nodes[0]))
	}
	answers := make([]answer[T], len(nodes))
	ops := make([]func(context.Context) (T, error), len(nodes))
	for i, n := range nodes {
		ops[i] = func(ctx context.Context) (T, error) { return r.call(r.by, ctx, n) }
	}
	var late func(int, T, error)
	if r.late != nil {
		late = func(i int, v T, err error) { r.late(r.by, nodes[i], v, err) }
	}
	cs := transport.StartCalls(ctx, c.work, ops, late)
	got, why := cs.Wait(ctx, len(nodes), r.timeout, r.enough(len(nodes)))
	for i, n := range nodes {
		answers[i] = answer[T]{err: n.unanswered(r.op, why), abandoned: true}
	}
	for _, g := range got {
		answers[g.I] = answer[T]{v: g.V, err: g.Err}
	}
	return append(dst, answers...)
}

// askOne puts the question to the one node n (see transport.AwaitOn).
func (r round[T, B]) askOne(ctx context.Context, c *Client, n *node) answer[T] {
	v, err, left := transport.AwaitOn(ctx, c.work, n, r.lateTakesError && n.Busy(), r.timeout, r.by, r.call, r.late)
	if left {
		err = n.unanswered(r.op, err)
	}
	return answer[T]{v: v, err: err, abandoned: left}
}

// enough returns the test that ends a round's wait early: a majority of
// n nodes said yes (nil without yes).
func (r round[T, B]) enough(n int) func([]transport.Reply[T]) bool {
	if r.yes == nil {
		return nil
	}
	need := transport.Majority(n)
	return func(got []transport.Reply[T]) bool {
		yes := 0
		for _, g := range got {
			if g.Err == nil && r.yes(g.V) {
				yes++
			}
		}
		return yes >= need
	}
}

// count tallies answers: an answer that is not an error is a yes if yes
// says so, a no otherwise.
func count[T any](answers []answer[T], yes func(T) bool) transport.Votes {
	var v transport.Votes
	for _, a := range answers {
		v.Add(a.err == nil && yes(a.v), a.err)
	}
	return v
}

// isYes is the yes of a question answered yes or no.
func isYes(ok bool) bool { return ok }

// undecided returns the error of an undecided verdict among n nodes: ctxErr
// if the caller's context ended; on one node, its error; on several, a
// *QuorumError with every node's error.
func undecided(v transport.Votes, ctxErr error, n int) error {
	if ctxErr != nil {
		return ctxErr
	}
	if n == 1 && len(v.Failures) == 1 {
		return v.Failures[0]
	}
	return &QuorumError{OK: v.Yes, Nodes: n, Quorum: transport.Majority(n), Errs: v.Failures}
}

// errUnsent is a node's error for an acquire not sent because the Client's
// release of the key there was still unanswered at the node timeout
// (transport.Flights). Nothing was sent, so there is nothing to give back
// (neverSent); the node is slow, not down, and Lock waits for it (isSlow).
var errUnsent = errors.New("not sent: the Client's release of the key on this node was still unanswered")

// releasesUnderWay returns, for each of nodes where the Client's release of
// key is under way, the channels of those releases; nil if none.
func releasesUnderWay(nodes []*node, key string) map[*node][]<-chan struct{} {
	var m map[*node][]<-chan struct{}
	for _, n := range nodes {
		if chs := n.releases.Under(key); chs != nil {
			if m == nil {
				m = make(map[*node][]<-chan struct{})
			}
			m[n] = chs
		}
	}
	return m
}
