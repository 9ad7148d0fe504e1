package dlock

import "sync"

// The quorum verdict
//
// Every question dlock puts to its nodes (may I have the lock, is it
// released, is it extended, who holds it) is decided the same way: yes
// when a majority, n/2+1, says yes; no when so many say no that a majority
// for yes is out of reach; undecided otherwise, when too many nodes failed
// to answer either way. A single node is a quorum of one: its yes or no is
// the verdict, and its failure leaves the question undecided.

// majority returns how many of n nodes make a quorum.
func majority(n int) int { return n/2 + 1 }

// quorum returns how many of the Client's nodes must agree.
func (c *Client) quorum() int { return majority(len(c.nodes)) }

// verdict is what a quorum of nodes decided.
type verdict int

const (
	undecided verdict = iota // too many nodes failed to answer
	agreed                   // a majority said yes
	refused                  // a majority for yes is out of reach
)

// votes counts the answers to one question: yes, no, and the errors of
// the nodes that gave neither.
type votes struct {
	yes, no  int
	failures []error
}

// count tallies answers: an answer that is not an error is a yes if yes
// says so, a no otherwise.
func count[T any](answers []answer[T], yes func(T) bool) votes {
	var v votes
	for _, a := range answers {
		v.add(a.err == nil && yes(a.v), a.err)
	}
	return v
}

// add counts one answer: err, or else a yes or a no.
func (v *votes) add(yes bool, err error) {
	switch {
	case err != nil:
		v.failures = append(v.failures, err)
	case yes:
		v.yes++
	default:
		v.no++
	}
}

// isYes is the yes of a question answered yes or no.
func isYes(ok bool) bool { return ok }

// of returns the verdict of the votes of n nodes.
func (v votes) of(n int) verdict {
	switch q := majority(n); {
	case v.yes >= q:
		return agreed
	case v.no > n-q:
		return refused
	}
	return undecided
}

// undecided returns the error of an undecided verdict among n nodes: on
// one node, that node's error; on several, a *QuorumError with every
// node's error. ctxErr, the caller's context's error, is the reason when
// it is not nil.
func (v votes) undecided(ctxErr error, n int) error {
	if ctxErr != nil {
		return ctxErr
	}
	if n == 1 && len(v.failures) == 1 {
		return v.failures[0]
	}
	return &QuorumError{OK: v.yes, Nodes: n, Quorum: majority(n), Errs: v.failures}
}

// ballot counts the answers to one question as they come, in time or late
// (transport.Calls), and acts once, when they first reach a verdict.
type ballot struct {
	n      int
	decide func(verdict) // called once, with agreed or refused

	mu      sync.Mutex
	v       votes
	decided bool
}

// add counts one node's answer and returns the votes and verdict so far.
func (b *ballot) add(yes bool, err error) (votes, verdict) {
	b.mu.Lock()
	b.v.add(yes, err)
	v, vd := b.v, b.v.of(b.n)
	first := vd != undecided && !b.decided
	b.decided = b.decided || first
	b.mu.Unlock()
	if first {
		b.decide(vd)
	}
	return v, vd
}
