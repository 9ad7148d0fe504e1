package dlock

import (
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

// answer is one node's answer in a round (transport.Round).
type answer[T any] = transport.Answer[T]

// round is a question put to the Client's nodes at once.
type round[T, B any] = transport.Round[T, B, *node]

// count tallies answers: an answer that is not an error is a yes if yes
// says so, a no otherwise.
func count[T any](answers []answer[T], yes func(T) bool) transport.Votes {
	var v transport.Votes
	for _, a := range answers {
		v.Add(a.Err == nil && yes(a.V), a.Err)
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
