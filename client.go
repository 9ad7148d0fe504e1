package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/redis/go-redis/v9"
)

// Client obtains locks from one Redis deployment: a standalone server, a
// Sentinel-managed master (redis.NewFailoverClient) or a Redis Cluster. It
// is safe for concurrent use. Close it when done: it owns the subscriptions
// waiters use and the goroutines that clean up after callers who gave up.
type Client struct {
	nodes []*node

	closed atomic.Bool
	// evictionChecked: memory policies were asked for (eviction.go).
	evictionChecked atomic.Bool
	ctx             context.Context // ended by Close
	close           context.CancelFunc
	done            <-chan struct{} // ctx.Done()
	// cleanups is the context every cleanup's own derives from: Close
	// ends it closeGrace after it begins (cleanupContext).
	cleanups    context.Context
	endCleanups context.CancelFunc
	closeOnce   sync.Once

	hooks   atomic.Pointer[hooks]       // observer and tracer (observe.go), nil when neither
	logger  atomic.Pointer[slog.Logger] // see observe.go
	listens listens                     // listening waiters by key (listen.go)
	// leaving holds a slot per waiter leaving the line (line_wait.go).
	leaving chan struct{}
	wakes   wakes         // the line's waiters, and their wake subscriptions by key (line_wakes.go)
	waiters atomic.Uint64 // waiters so far, which name them (line_handover.go)
	// work runs calls callers may leave, and cleanups; Close waits for it.
	work *ask.Work
}

// cleanupTimeout bounds best-effort releases after the caller has gone
// (where go-redis honours context deadlines; else its read timeout does).
const cleanupTimeout = 5 * time.Second

// closeGrace is the longest Close lets cleanups run (a give-back waits up
// to cleanupTimeout for go-redis, then as long for the server): a stalled
// node's give-backs would otherwise chain, one after another's wait.
const closeGrace = 2 * cleanupTimeout

// cleanupContext returns a cleanup's context: cleanupTimeout (d, if given)
// from now, ended sooner by Close's grace (closeGrace).
func (c *Client) cleanupContext(d ...time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.cleanups, append(d, cleanupTimeout)[0])
}

// New returns a Client that locks on the given Redis clients: any go-redis
// client, or anything with the RedisClient methods (a wrapped client,
// go-redis's AutoPipeliner), so that New(rdb), New(cluster) and, for
// Redlock, New(rdbs...) read naturally (mix types as a []dlock.RedisClient
// or []redis.UniversalClient). One client is a single deployment. Several
// are Redlock over independent masters (redlock.go): a lock is held when a
// majority, len(nodes)/2+1, granted it; use an odd number, as 4 nodes
// survive one failure, like 3. Close does not close the go-redis clients.
//
// On a plain *redis.Client, many concurrent scripts are sent in pipelines
// of that client (Pipelined): its pool and hooks see every script
// (internal/transport).
//
// New panics, with an error matching ErrInvalidArgument or
// errors.ErrUnsupported, when no Client can work: no clients, a nil one,
// the same node twice (by client pointer or address), which would count its
// vote twice, or a *redis.Ring (even wrapped), which moves keys to other
// shards when one fails, so two clients could hold the same lock. Clients
// showing no address (a Sentinel client, an AutoPipeliner, some wrappers)
// are not compared by it: check a configured node list for duplicates.
func New[C RedisClient](nodes ...C) *Client {
	if len(nodes) == 0 {
		panic(invalid("New needs at least one Redis client"))
	}
	c := &Client{}
	seen := map[any]int{}
	for i, rdb := range nodes {
		if isNil(rdb) {
			panic(invalid("New: Redis client %d is nil", i))
		}
		if _, ok := any(rdb).(interface{ Options() *redis.RingOptions }); ok {
			panic(fmt.Errorf("dlock: New: *redis.Ring is not supported: a ring moves keys between shards when one fails, so two clients could hold the same lock: %w", errors.ErrUnsupported))
		}
		n := newNode(rdb, i)
		for _, id := range []any{identity(rdb, i), n.Addr} {
			if j, dup := seen[id]; dup && id != "" {
				panic(invalid("New: Redis clients %d and %d are the same node (%s): each node must be an independent master", j, i, n.Name))
			}
			seen[id] = i
		}
		c.nodes = append(c.nodes, n)
	}
	c.nodes[0].single = len(c.nodes) == 1
	if c.nodes[0].single {
		c.nodes[0].own = newLineOwn()
		c.nodes[0].ownArg, c.nodes[0].wakes = c.nodes[0].own, &c.wakes
	}
	c.leaving = make(chan struct{}, leavingLimit)
	c.ctx, c.close = context.WithCancel(context.Background())
	c.cleanups, c.endCleanups = context.WithCancel(context.Background())
	c.done = c.ctx.Done()
	c.work = ask.NewWork()
	c.listens.nodes = c.nodes
	return c
}

// identity tells rdb apart from other clients: its pointer, if held by
// pointer (a value may not be comparable), else its place i.
func identity(rdb any, i int) any {
	if v := reflect.ValueOf(rdb); v.Kind() == reflect.Pointer {
		return v.Pointer()
	}
	type place int
	return place(i)
}

// isNil reports whether rdb is nil, or a nil pointer in an interface.
func isNil(rdb any) bool {
	if rdb == nil {
		return true
	}
	v := reflect.ValueOf(rdb)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Close releases dlock's own resources: its pub/sub subscriptions and
// background goroutines. It waits for calls in flight and cleanups (the
// give-back of a grant a caller left behind): the cleanups at most 10 s,
// then they stop (a grant not given back expires by its TTL), and a Redis
// command in flight as long as go-redis's timeouts and retries let it (it
// sends a command whose read timed out again: on a paused server, about
// twice the read timeout, 3 s by default, was measured). Held locks stay
// (they expire, or can still be unlocked), as do the go-redis clients. Waiting Lock calls return an error
// matching ErrClosed. Close is idempotent. Close it before the go-redis
// clients (defer it after making them, as usual): closed first, they take
// the cleanups' scripts with them, and what those would have cleared lapses
// as a crashed process's would (a waiter's record by its alive time, a key
// handed to a waiter that gave up by that waiter's TTL).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.work.Close()
		c.closed.Store(true)
		c.close()
		// The nodes' subscriptions end beside each other and beside the
		// work (a paused node's takes seconds: go-redis's timeouts).
		var stopped sync.WaitGroup
		for _, n := range c.nodes {
			stopped.Go(n.StopWatching)
		}
		// Waits for work started meanwhile too: a grant that comes back
		// during Close is given back before it returns, within closeGrace.
		// A cleanup after Close (an Unlock's) runs as before, unless the
		// grace ran out.
		grace := time.AfterFunc(closeGrace, c.endCleanups)
		c.work.Drain()
		grace.Stop()
		stopped.Wait()
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return nil
}

// nodesAt returns the Client's nodes at the indices idx.
func (c *Client) nodesAt(idx []int) []*node {
	nodes := make([]*node, len(idx))
	for i, j := range idx {
		nodes[i] = c.nodes[j]
	}
	return nodes
}

// usable returns why the Client cannot be used, or nil.
func (c *Client) usable() error {
	if c.closed.Load() {
		return ErrClosed
	}
	return nil
}

// stopped returns why a wait must stop: ctx's end, or ErrClosed; else nil.
func (c *Client) stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.usable()
}

// spawn runs fn in a goroutine that Close waits for (ask.Work).
func (c *Client) spawn(fn func()) { c.work.Spawn(fn) }

// begin registers a call that Close must wait for, which end ends. It
// reports false (and registers nothing) once the Client is closed.
func (c *Client) begin() bool { return c.work.Begin() }

// end ends a call that begin registered.
func (c *Client) end() { c.work.End() }

// bind returns a context that ends with ctx or, with cause ErrClosed, when
// the Client is closed; unbind releases it.
func (c *Client) bind(ctx context.Context) (_ context.Context, unbind func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.ctx, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// cleanup runs fn in the background on a fresh context: for work that must
// happen even though the caller has gone.
func (c *Client) cleanup(fn func(ctx context.Context)) {
	c.spawn(func() {
		ctx, cancel := c.cleanupContext()
		defer cancel()
		fn(ctx)
	})
}
