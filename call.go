package dlock

import (
	"context"
	"sync"
)

// await runs op and returns its result, or ctx's error as soon as ctx ends,
// whichever comes first. left reports that op is still running and that
// abandoned will receive its result; when ctx has ended before op could
// start, await returns ctx's error with left false (nothing was sent).
//
// go-redis ignores context deadlines unless the client was built with
// ContextTimeoutEnabled, and even then cannot take back a command the server
// has already run. So op runs in its own goroutine, on a context that keeps
// ctx's values but not its cancellation, and always runs to completion
// (bounded by the go-redis client's own timeouts). If the caller has gone by
// then, abandoned receives op's result so that its effect can be undone: a
// lock the server granted after the caller gave up is released, instead of
// blocking everyone for a TTL. The goroutine belongs to the Client, whose
// Close waits for it.
func await[T any](c *Client, ctx context.Context, op func(context.Context) (T, error), abandoned func(T, error)) (v T, err error, left bool) {
	if ctx.Done() == nil { // cannot end: no goroutine needed
		v, err = op(ctx)
		return v, err, false
	}
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err, false
	}
	type result struct {
		v   T
		err error
	}
	var (
		mu   sync.Mutex
		gone bool
		done = make(chan result, 1)
	)
	c.spawn(func() {
		v, err := op(context.WithoutCancel(ctx))
		mu.Lock()
		left := gone
		if !left {
			done <- result{v, err}
		}
		mu.Unlock()
		if left && abandoned != nil {
			abandoned(v, err)
		}
	})
	select {
	case r := <-done:
		return r.v, r.err, false
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		select {
		case r := <-done: // the answer came in time after all
			return r.v, r.err, false
		default:
		}
		gone = true
		return zero, ctx.Err(), true
	}
}
