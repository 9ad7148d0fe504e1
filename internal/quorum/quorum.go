// Package quorum is how a Redlock's nodes decide together: the verdict of
// their answers (a majority, n/2+1, says yes; one node is a quorum of one),
// counted at once (Votes) or as the answers come (Ballot), and the ordering
// rules between one Client's requests to a node: an Unlock sent after the
// acquire it releases has answered (Pending), an acquire sent after the
// release of the same key under way (Flights). It knows nothing of Redis:
// the protocol (the root package) asks and counts.
package quorum

import "sync"

// The quorum verdict: every question put to N nodes is decided alike. Yes
// when a majority, n/2+1, says yes; no when so many say no that a majority
// for yes is out of reach; undecided when too many failed to answer either
// way. One node is a quorum of one.

// Majority returns how many of n nodes make a quorum.
func Majority(n int) int { return n/2 + 1 }

// Verdict is what a quorum of nodes decided.
type Verdict int

// The verdicts.
const (
	Undecided Verdict = iota // too many nodes failed to answer
	Agreed                   // a majority said yes
	Refused                  // a majority for yes is out of reach
)

// Votes counts the answers to one question: yes, no, and the errors of the
// nodes that gave neither.
type Votes struct {
	Yes, No  int
	Failures []error
}

// Add counts one answer: err, or else a yes or a no.
func (v *Votes) Add(yes bool, err error) {
	switch {
	case err != nil:
		v.Failures = append(v.Failures, err)
	case yes:
		v.Yes++
	default:
		v.No++
	}
}

// Of returns the verdict of the votes of n nodes.
func (v Votes) Of(n int) Verdict {
	switch q := Majority(n); {
	case v.Yes >= q:
		return Agreed
	case v.No > n-q:
		return Refused
	}
	return Undecided
}

// Ballot counts the answers to one question as they come, in time or late;
// Add says when they first reach a verdict, once.
type Ballot struct {
	N int

	mu      sync.Mutex
	v       Votes
	decided bool
}

// Add counts one node's answer and returns the verdict so far, and whether
// this answer decided it (Agreed or Refused, reached now for the first time).
func (b *Ballot) Add(yes bool, err error) (vd Verdict, decided bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.v.Add(yes, err)
	vd = b.v.Of(b.N)
	decided = vd != Undecided && !b.decided
	b.decided = b.decided || decided
	return vd, decided
}
