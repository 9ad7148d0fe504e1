package quorum

import "sync"

// Pending holds the nodes whose acquire had not answered when a Redlock was
// obtained (a majority had granted it). An Unlock sent at once could reach
// such a node before its acquire, find nothing, and leave the late grant to
// be given back: two scripts where one will do. So Unlock releases such a
// node only after its answer has come (Arrival), and says so first
// (ReleaseAfter), so that the late answer is left to it (Arrived). Its
// methods are safe on a nil *Pending: no node was pending.
type Pending[N comparable] struct {
	mu      sync.Mutex
	waiting map[N]chan struct{} // closed when that node's answer has come
	after   bool                // Unlock releases each waiting node once its answer has come
}

// NewPending returns the tracker for the nodes whose answer did not come
// in time, or nil if there are none.
func NewPending[N comparable](late []N) *Pending[N] {
	if len(late) == 0 {
		return nil
	}
	p := &Pending[N]{waiting: make(map[N]chan struct{}, len(late))}
	for _, n := range late {
		p.waiting[n] = make(chan struct{})
	}
	return p
}

// Arrived records that n's answer has come, and reports whether Unlock
// will release n after it (so that the answer need not be given back).
func (p *Pending[N]) Arrived(n N) (releasedAfter bool) {
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

// ReleaseAfter is Unlock's, before it marks the lock asked: from now on a
// late answer is left to Unlock.
func (p *Pending[N]) ReleaseAfter() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.after = true
	p.mu.Unlock()
}

// Arrival returns the channel closed when n's answer has come, or nil if it
// has (or n was never pending).
func (p *Pending[N]) Arrival(n N) <-chan struct{} {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[n]
}
