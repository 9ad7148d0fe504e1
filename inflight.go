package dlock

import (
	"errors"
	"slices"
	"sync"
)

// Releases still on their way when the next acquire begins
//
// A Redlock Unlock is decided once a majority of the nodes has released
// (Lock.releaseAll); the others' answers come later. A caller that locks
// the key again at once, as a loop or another goroutine of the Client
// does, would send its acquire to such a node on another connection,
// where it may run before the release and find the key held by the lock
// just released: a refusal there, and a notify key that makes every
// acquire and release of the key on that node mark, announce and take the
// full path for the notify window (3 s), which made a loop of Lock and
// Unlock on several nodes run half as many commands again as it needs
// (docs/design.md, "Measurements").
//
// So a Client's acquire of a key on a node waits until the Client's
// release of that key there has ended: answered, which means that the
// server has run the release, and an acquire sent after it runs after it;
// or failed on the client's side (go-redis's read or pool timeout), after
// which the acquire is sent all the same, as before, and may still meet
// the release's key there.
// (The mirror of pending.go, where a release waits for its own lock's
// acquire.) It waits at most the node timeout (attempt.acquireOn); the
// caller, who waits for a majority, does not wait for it unless the node
// is needed for one.

// inflight holds a node's releases under way, by lock key: a channel for
// each, closed once it has ended.
type inflight struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
}

// start records that a release of key is about to be sent, and returns
// the channel that end closes.
func (f *inflight) start(key string) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string][]chan struct{})
	}
	f.m[key] = append(f.m[key], ch)
	return ch
}

// end records the end of the release that start gave ch: its answer, or
// its error.
func (f *inflight) end(key string, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rest := slices.DeleteFunc(f.m[key], func(c chan struct{}) bool { return c == ch }); len(rest) > 0 {
		f.m[key] = rest
	} else {
		delete(f.m, key)
	}
	close(ch)
}

// under returns the channels of key's releases under way, nil if none. An
// attempt takes them before it sends anything, so that what it waits for
// was started before it: never its own Lock's release, which waits for
// the attempt's answer (pending.go).
func (f *inflight) under(key string) []<-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	var chs []<-chan struct{}
	for _, ch := range f.m[key] {
		chs = append(chs, ch)
	}
	return chs
}

// errUnsent is a node's error for an acquire that was not sent, because
// the Client's release of the key there was still unanswered when the
// node timeout passed (attempt.acquireOn). Not sent: its node has not
// answered for as long as the attempt waits for any node, and acquires
// each sent after the release before it had its full timeout would
// queue a stalled node's acquires one behind another. neverSent knows it
// (there is nothing to give back), and so does isSlow: the node is slow,
// not down, and Lock waits for it.
var errUnsent = errors.New("not sent: the Client's release of the key on this node was still unanswered")

// releasesUnderWay returns, for each of nodes where the Client's release
// of key is under way, the channels of those releases; nil if none.
func releasesUnderWay(nodes []*node, key string) map[*node][]<-chan struct{} {
	var m map[*node][]<-chan struct{}
	for _, n := range nodes {
		if chs := n.inflight.under(key); chs != nil {
			if m == nil {
				m = make(map[*node][]<-chan struct{})
			}
			m[n] = chs
		}
	}
	return m
}
