package transport

import (
	"context"
	"sync/atomic"
	"time"
)

// sharedBound is the context that bounds the pipelined scripts' waits
// that nothing else can end (a caller's context that never ends), shared
// by the scripts that start within the same second: a context and timer
// of its own per script cost the client more than the sharing. An
// optimisation: docs/design.md, "Ninth session", has the row it pays on.
type sharedBound struct {
	within atomic.Pointer[boundCtx]
}

// boundCtx is a context that ends at its deadline.
type boundCtx struct {
	context.Context
	cancel context.CancelFunc // kept, never called: the deadline ends it
}

// get returns a context that ends between bound and bound plus a second
// from now.
func (s *sharedBound) get(bound time.Duration) context.Context {
	now := time.Now()
	if b := s.within.Load(); b != nil {
		if d, _ := b.Deadline(); d.Sub(now) >= bound {
			return b
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(bound+time.Second))
	b := &boundCtx{ctx, cancel}
	s.within.Store(b)
	return b
}
