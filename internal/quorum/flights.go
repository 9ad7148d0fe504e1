package quorum

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Flights holds a node's releases under way, by lock key, so that the same
// Client's next acquire of the key there is sent after the release has run
// (a Redlock loop of Lock and Unlock would otherwise meet its own release's
// key: docs/design.md, "Measurements"). The zero value is ready.
type Flights struct {
	mu sync.Mutex
	m  map[string][]chan struct{}
}

// Start records that a release of key is about to be sent, and returns the
// channel End closes.
func (f *Flights) Start(key string) chan struct{} {
	ch := make(chan struct{})
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string][]chan struct{})
	}
	f.m[key] = append(f.m[key], ch)
	return ch
}

// End records that the release Start gave ch has ended: answered (the
// server ran it), or failed.
func (f *Flights) End(key string, ch chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rest := slices.DeleteFunc(f.m[key], func(c chan struct{}) bool { return c == ch }); len(rest) > 0 {
		f.m[key] = rest
	} else {
		delete(f.m, key)
	}
	close(ch)
}

// Under returns the channels of key's releases under way, nil if none. An
// attempt takes them before it sends anything, so that it never waits for
// its own Lock's release, which waits for the attempt (Pending).
func (f *Flights) Under(key string) []<-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	var chs []<-chan struct{}
	for _, ch := range f.m[key] {
		chs = append(chs, ch)
	}
	return chs
}

// AwaitAll reports whether every channel of chs closed within d, while
// ctx lasted (true at once for none).
func AwaitAll(ctx context.Context, chs []<-chan struct{}, d time.Duration) bool {
	if len(chs) == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}
