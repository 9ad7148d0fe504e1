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

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// Client obtains locks from one Redis deployment: a standalone server, a
// Sentinel-managed master (redis.NewFailoverClient) or a Redis Cluster.
// A Client is safe for concurrent use. Close it when done: it owns the
// subscriptions waiters use and the goroutines that clean up after callers
// who gave up.
type Client struct {
	nodes []*node

	closed atomic.Bool
	// evictionChecked is set once the nodes' memory policies have been
	// asked for (eviction.go).
	evictionChecked atomic.Bool
	ctx             context.Context // ended by Close
	close           context.CancelFunc
	done            <-chan struct{} // ctx.Done()
	closeOnce       sync.Once

	hooks  atomic.Pointer[hooks]       // observer and tracer (observe.go), nil when neither
	logger atomic.Pointer[slog.Logger] // see observe.go
	names  namesCache                  // see keys.go
	groups groups                      // waiters by key, single node (queue.go)
	gates  gates                       // listening waiters by key (listen.go)
	// work runs the calls whose callers may stop waiting, and the
	// cleanups, and counts what Close waits for.
	work *transport.Work
}

// cleanupTimeout bounds the context of best-effort releases that run after
// the caller has gone (only effective where the go-redis client honours
// context deadlines; otherwise its own read timeout bounds them).
const cleanupTimeout = 5 * time.Second

// New returns a Client that locks on the given Redis clients: any go-redis
// client (or anything that has the RedisClient methods, such as a client
// wrapped to inject faults or to instrument it, or go-redis's
// AutoPipeliner), so that New(rdb), New(cluster) and, for Redlock,
// New(rdbs...) with a []*redis.Client all read naturally (mix types as a
// []dlock.RedisClient or []redis.UniversalClient). One client means a
// single Redis deployment. Several mean Redlock over independent masters
// (redlock.go): a lock is held when a majority, len(nodes)/2+1, granted it.
// An even number of nodes works but tolerates no more failures than one
// node fewer (4 nodes need 3, like 5 do, and survive only one failure), so
// use an odd number. The go-redis clients stay the caller's: Close does not
// close them.
//
// On a plain *redis.Client (one server), when many goroutines run dlock's
// scripts at once, dlock sends them pipelined over one connection of a
// client it makes for itself from the same options, and closes in Close
// (internal/transport); a lone call goes straight to the given client. The
// user's hooks (tracing, metrics) see only the calls that go straight.
//
// New panics, with an error that matches ErrInvalidArgument or
// errors.ErrUnsupported, when it is called in a way no Client can work
// with: no clients, a nil one, the same node twice (the same client, or
// two clients with the same address), which would count one node's vote
// twice; or a *redis.Ring, which moves keys to other shards when a shard
// goes down, so that two clients could hold the same lock (wrapped too).
// Nodes are told apart by client pointer and by address; clients that
// show no address (a Sentinel failover client, an AutoPipeliner, some
// wrappers) are not compared by address, so do not pass one node twice
// that way. A program that builds its node list from configuration should
// check it for duplicates first.
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
	c.ctx, c.close = context.WithCancel(context.Background())
	c.done = c.ctx.Done()
	c.work = transport.NewWork()
	return c
}

// identity is what tells rdb apart from other clients: the pointer, for a
// client held by pointer (a value may not even be comparable), else its
// place i. (Two values wrapping one client are caught by their address,
// when they have one.)
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
// background goroutines (the idle workers that run its calls end, see
// internal/transport/workers.go). It waits for in-flight calls and background cleanups, which are bounded by the go-redis clients' timeouts; the
// give-back of a call that went unanswered waits at most 5 s for go-redis
// to be done with the call, and 5 s more for the server to answer. It does
// not close the go-redis clients, and it does not release held locks (they
// expire, or can still be unlocked). Waiting Lock calls return an error
// matching ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.work.Close()
		c.closed.Store(true)
		c.close()
		for _, n := range c.nodes {
			n.StopWatching()
		}
		// Work started while this waits is waited for too: a grant that
		// comes back after its caller left, during Close, is given back
		// before Close returns.
		c.work.Drain()
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

// spawn runs fn in a goroutine that Close waits for (transport.Work).
func (c *Client) spawn(fn func()) { c.work.Spawn(fn) }

// begin registers a call that Close must wait for; done ends it. ok is
// false (and nothing is registered) once the Client is closed.
func (c *Client) begin() (done func(), ok bool) { return c.work.Begin() }

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
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		fn(ctx)
	})
}
