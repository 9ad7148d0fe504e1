package gate

import (
	"context"
	"sync"
)

// Limit counts work under way and holds newcomers back while the count is
// at Max or above (the queue's departures: callers that give up faster
// than the server answers must not pile work up on it). The zero value
// with Max set is ready to use.
type Limit struct {
	Max int

	mu    sync.Mutex
	n     int
	below chan struct{} // closed when n falls below Max; nil while nobody waits
}

// Add adds d (negative: work done) to the count.
func (l *Limit) Add(d int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n += d
	if l.below != nil && l.n < l.Max {
		close(l.below)
		l.below = nil
	}
}

// Below reports whether the count is below Max: newcomers pass.
func (l *Limit) Below() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n < l.Max
}

// Wait returns once the count is below Max, or ctx's error if it ends first.
func (l *Limit) Wait(ctx context.Context) error {
	for {
		l.mu.Lock()
		if l.n < l.Max {
			l.mu.Unlock()
			return nil
		}
		if l.below == nil {
			l.below = make(chan struct{})
		}
		below := l.below
		l.mu.Unlock()
		select {
		case <-below:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
