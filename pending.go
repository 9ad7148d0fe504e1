package dlock

import "sync"

// Grants still on their way when Unlock begins
//
// A Redlock attempt is decided once a majority has granted it; the other
// nodes' answers come later (attempt.late). A caller that unlocks at once,
// as a short critical section does, often does so before they come. Sent
// then, a release may reach such a node before its acquire (they travel on
// different connections) and find nothing, so the late grant has to be
// given back: two scripts where one will do.
//
// So Unlock releases such a node only after its acquire's answer has come:
// an answer means the server has run the acquire, and a release sent after
// it runs after it. Unlock says so before it marks the lock asked, and late
// then leaves the grant to Unlock instead of giving it back. A late error
// is still given back by late (releaseUncertain: the request may yet run),
// and Unlock releases that node after it too.

// pendingGrants holds the nodes whose acquire had not answered when the
// lock was obtained. Its methods are safe on a nil *pendingGrants (no node
// was pending: one node, or all answered in time).
type pendingGrants struct {
	mu      sync.Mutex
	waiting map[*node]chan struct{} // closed when that node's answer has come
	after   bool                    // Unlock releases each waiting node once its answer has come
}

// newPendingGrants returns the tracker for the abandoned answers among an
// attempt's, or nil if there are none.
func newPendingGrants(nodes []*node, answers []answer[grant]) *pendingGrants {
	var p *pendingGrants
	for i, a := range answers {
		if !a.abandoned {
			continue
		}
		if p == nil {
			p = &pendingGrants{waiting: make(map[*node]chan struct{})}
		}
		p.waiting[nodes[i]] = make(chan struct{})
	}
	return p
}

// arrived records that n's answer has come, and reports whether Unlock
// will release n after it (so that late need not give a grant back).
func (p *pendingGrants) arrived(n *node) (releasedAfter bool) {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ch, ok := p.waiting[n]
	if !ok {
		return false
	}
	delete(p.waiting, n)
	close(ch)
	return p.after
}

// releaseAfter is Unlock's, before it marks the lock asked: from now on a
// late answer is left to Unlock.
func (p *pendingGrants) releaseAfter() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.after = true
	p.mu.Unlock()
}

// arrival returns the channel closed when n's answer has come, or nil if
// it has (or n was never pending): Unlock's release to n waits for it.
func (p *pendingGrants) arrival(n *node) <-chan struct{} {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[n]
}
