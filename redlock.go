package dlock

import (
	"errors"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/quorum"
)

// Redlock (docs/redlock.md): a Client over N independent masters asks them
// all at once, each answer bounded by the node timeout (one node is a
// quorum of one, through the same code). A lock is a majority's grant
// within the TTL, valid for TTL - elapsed - drift; later grants join it
// (attempt.late); a failed attempt is given back on every node.
//
// Fences across nodes. A grant's fence is the maximum over the nodes that
// granted it (fence.go issues each); a later grant must not come out lower.
// Any two majorities share a node x, which the later holder won after our
// lock on x was released or expired:
//  - Released: the release raises x's counter to at least our fence,
//    atomically with the delete, so x's next grant is at least fence+1
//    and the later majority's maximum is above ours.
//  - Expired: our key lived a full TTL on x's clock, and our grant was
//    decided within the TTL of our first send, so the later grant on x
//    comes at least (validity) after we saw every fence of ours; its fence
//    is at least x's clock in microseconds, above ours while the nodes'
//    clocks differ by less than the validity (seconds, for 30 s TTLs).
// A node that loses its data falls under the second case (its counter
// restarts from its clock). Per the Redis guidance, a node without
// persistence must stay down longer than the longest TTL before rejoining,
// or a lock it forgot could be granted twice.

// DefaultNodeTimeout is how long a Redlock Client waits for each node's
// answer without WithNodeTimeout (at most a tenth of the TTL). A
// single-node Client has none unless given; its context bounds the call.
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

// answer is one node's answer in a round (ask.Round).
type answer[T any] = ask.Answer[T]

// round is a question put to the Client's nodes at once.
type round[T any] = ask.Round[T, *node]

// count tallies answers: an answer that is not an error is a yes if yes
// says so, a no otherwise.
func count[T any](answers []answer[T], yes func(T) bool) quorum.Votes {
	var v quorum.Votes
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
func undecided(v quorum.Votes, ctxErr error, n int) error {
	if ctxErr != nil {
		return ctxErr
	}
	if n == 1 && len(v.Failures) == 1 {
		return v.Failures[0]
	}
	return &QuorumError{OK: v.Yes, Nodes: n, Quorum: quorum.Majority(n), Errs: v.Failures}
}

// errUnsent: an acquire not sent because the Client's release of the key on
// the node was unanswered at the node timeout (quorum.Flights): nothing
// to give back (neverSent); slow, not down, so Lock waits (isSlow).
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
