package dlock

import (
	"context"
	"slices"
	"sync"
)

// gates keeps a Client's notified waiters (Redlock, WithReplicaAck) on one
// key from all trying at once: each key's gate lets one waiter at a time
// listen for releases and try, and the others wait in arrival order,
// without a word to Redis. A release then costs each Client one attempt,
// however many of its goroutines wait, and the Client's waiters are served
// in their order (across Clients, fairness stays best-effort).
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

// gate is one key's: busy while a waiter has the turn; queue holds the
// others, each woken by closing its channel when the turn passes to it.
type gate struct {
	busy  bool
	queue []chan struct{}
}

// turn is a waiter's turn at a key's gate; leave passes it on.
type turn struct {
	gs  *gates
	key string
}

// enter waits for the turn at key's gate, until ctx ends (its error) or
// closed is closed (ErrClosed).
func (gs *gates) enter(ctx context.Context, closed <-chan struct{}, key string) (*turn, error) {
	t := &turn{gs: gs, key: key}
	gs.mu.Lock()
	g := gs.m[key]
	if g == nil {
		g = &gate{}
		if gs.m == nil {
			gs.m = map[string]*gate{}
		}
		gs.m[key] = g
	}
	if !g.busy {
		g.busy = true
		gs.mu.Unlock()
		return t, nil
	}
	mine := make(chan struct{})
	g.queue = append(g.queue, mine)
	gs.mu.Unlock()
	var err error
	select {
	case <-mine:
		return t, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	if i := slices.Index(g.queue, mine); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		gs.mu.Unlock()
		return nil, err
	}
	gs.mu.Unlock()
	t.leave() // the turn came as we gave up: pass it on
	return nil, err
}

// leave passes the turn to the next waiter, or frees the gate.
func (t *turn) leave() {
	gs := t.gs
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[t.key]
	if len(g.queue) == 0 {
		delete(gs.m, t.key)
		return
	}
	next := g.queue[0]
	g.queue = g.queue[1:]
	close(next)
}
