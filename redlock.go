package dlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Redlock
//
// A Client over N nodes (independent Redis masters, not replicas of each
// other) runs the Redlock algorithm of the Redis guidance; a single node is
// simply a quorum of one, through the same code.
//
//  1. Note the time, then send the same key and token to all N nodes in
//     parallel, each answer bounded by a short per-node timeout (WithNodeTimeout),
//     so a stalled node costs at most that timeout.
//  2. The lock is obtained when a majority, N/2+1, granted it and the time
//     elapsed is below the TTL. Its validity is TTL - elapsed - drift,
//     counted from step 1 (renew.go). Once a majority has granted it, the
//     other nodes are not waited for: a grant that comes later joins the
//     lock, or is released at once if an Extend, renewal or Unlock has
//     begun meanwhile (which may have reached that node first).
//  3. Otherwise release it on every node that may have granted it,
//     including those whose answer was an error, before trying again after a
//     random delay. A node that answers only after its timeout is released
//     when the answer comes.
//
// Extend succeeds only when a majority extends it within the remaining
// validity. Unlock releases it on all nodes in parallel. Both return as soon
// as a majority has said yes; the other nodes' answers are not waited for
// (their commands still run, in the background).
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

// errNodeTimeout is a node's error when it did not answer within the
// per-node timeout.
var errNodeTimeout = errors.New("no answer within the node timeout")

// quorum returns how many nodes must agree: a majority.
func (c *Client) quorum() int { return len(c.nodes)/2 + 1 }

// answer is one node's answer in a fan-out.
type answer[T any] struct {
	v         T
	err       error
	abandoned bool // sent, no answer in time; late was or will be called with it
}

// fanout runs call on every node in nodes in parallel and returns their
// answers, in order. Each answer is waited for until timeout (if positive)
// or until ctx ends; a node that has not answered by then gets an error
// (a *NodeError for the timeout, ctx's error otherwise), and when it does
// answer, late receives the answer so that its effect can be undone.
//
// Calls run on a context without ctx's cancellation, to completion (see
// await), in goroutines owned by the Client.
func fanout[T any](c *Client, ctx context.Context, nodes []*node, timeout time.Duration, op string,
	call func(context.Context, *node) (T, error), late func(*node, T, error)) []answer[T] {
	return fanoutUntil(c, ctx, nodes, timeout, op, call, late, 0, nil)
}

// fanoutUntil is fanout that stops waiting as soon as enough answers
// satisfy yes (enough 0: wait for all); the others are abandoned like
// those that time out, and late receives them when they come.
func fanoutUntil[T any](c *Client, ctx context.Context, nodes []*node, timeout time.Duration, op string,
	call func(context.Context, *node) (T, error), late func(*node, T, error), enough int, yes func(T) bool) []answer[T] {
	answers := make([]answer[T], len(nodes))
	if len(nodes) == 1 && timeout <= 0 {
		n := nodes[0]
		var lateN func(T, error)
		if late != nil {
			lateN = func(v T, err error) { late(n, v, err) }
		}
		v, err, left := await(c, ctx, func(ctx context.Context) (T, error) { return call(ctx, n) }, lateN)
		answers[0] = answer[T]{v: v, err: err, abandoned: left}
		return answers
	}

	type reply struct {
		i int
		a answer[T]
	}
	var (
		mu      sync.Mutex
		over    bool
		replies = make(chan reply, len(nodes))
	)
	for i, n := range nodes {
		c.spawn(func() {
			v, err := call(context.WithoutCancel(ctx), n)
			mu.Lock()
			if !over {
				replies <- reply{i, answer[T]{v: v, err: err}}
				mu.Unlock()
				return
			}
			mu.Unlock()
			if late != nil {
				late(n, v, err)
			}
		})
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	got := make([]bool, len(nodes))
	yeses := 0
	take := func(r reply) {
		answers[r.i], got[r.i] = r.a, true
		if enough > 0 && r.a.err == nil && yes(r.a.v) {
			yeses++
		}
	}
wait:
	for pending := len(nodes); pending > 0; pending-- {
		select {
		case r := <-replies:
			take(r)
			if enough > 0 && yeses >= enough {
				break wait
			}
		case <-deadline:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	mu.Lock()
	over = true
	for len(replies) > 0 {
		take(<-replies)
	}
	mu.Unlock()
	for i, ok := range got {
		if ok {
			continue
		}
		answers[i].abandoned = true
		if err := ctx.Err(); err != nil {
			answers[i].err = err
		} else {
			answers[i].err = nodes[i].fail(op, errNodeTimeout)
		}
	}
	return answers
}

// tally counts a fan-out's answers: how many nodes said yes, how many said
// no, and the errors of the others.
func tally[T any](answers []answer[T], yes func(T) bool) (ok, no int, failures []error) {
	for _, a := range answers {
		switch {
		case a.err != nil:
			failures = append(failures, a.err)
		case yes(a.v):
			ok++
		default:
			no++
		}
	}
	return ok, no, failures
}

// undecided returns the error for a quorum operation that got neither
// enough yes nor enough no answers because nodes failed: on one node, that
// node's error; on several, ErrNoQuorum joined with every node's error.
func (c *Client) undecided(ctx context.Context, ok int, failures []error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(c.nodes) == 1 && len(failures) == 1 {
		return failures[0]
	}
	return &QuorumError{OK: ok, Nodes: len(c.nodes), Quorum: c.quorum(), Errs: failures}
}
