// Package dlock is a distributed mutual-exclusion lock on Redis.
//
// A Client wraps a go-redis client (standalone, Sentinel failover, or Redis
// Cluster). TryLock makes one attempt; Lock waits until the lock is free or
// the context ends. Each returns a *Lock, which Unlock releases and Extend
// renews:
//
//	locks := dlock.New(rdb)
//	defer locks.Close()
//	lock, err := locks.Lock(ctx, "lock:order:1001", dlock.WithTTL(10*time.Second))
//	if err != nil {
//		return err // errors.Is(err, dlock.ErrNotObtained) when someone else kept it
//	}
//	defer lock.Unlock(ctx)
//	return store.Write(ctx, order, lock.Fence())
//
// # What it guarantees
//
// On a single Redis server (one that does not lose writes it acknowledged):
//
//   - Mutual exclusion within the lease: the lock is one key set with
//     SET key token NX PX ttl, atomically, so at most one client holds it
//     until the TTL runs out.
//   - No deadlock: the key always has an expiry. No code path sets it
//     without one, so a crashed holder blocks others for at most the TTL.
//   - Owner-only release: the value is a fresh 160-bit random token per
//     acquisition, and Unlock, Extend and TTL act only while the key still
//     holds that token, checked and applied in one server-side step (a Lua
//     script). A holder whose lock expired
//     gets ErrNotHeld and cannot delete or extend the next holder's lock.
//   - Fencing: every grant carries Fence(), strictly greater than every fence
//     issued before it for the key, even after Redis lost its data (see
//     below). A resource that refuses writes with a lower fence than it has
//     seen is safe even when the lock is not.
//
// Every operation is one round trip. Waiting in Lock costs no polling and
// no connection per waiter: on one node, waiters queue in Redis in arrival
// order and the release hands the lock straight to the next live one
// (docs/waiting.md). Lock waits until its context ends, through a Redis
// restart or failover too (docs/failures.md).
//
// # Beyond one lock
//
// LockAll takes several keys' locks, all or none, in one sorted order, so
// that callers naming the same keys in different orders never deadlock.
// Client.Election is a leader election on a key: Campaign waits in the
// key's queue until elected and returns the leadership as a *Lock (its
// Fence is the term, its Context ends when leadership is lost, Unlock
// resigns); Leader says who leads, and Observe delivers every change by
// notification. Client.Semaphore (at most N holders) and Client.RWMutex
// (many readers or one writer, a waiting writer not starved) hand out
// permits and holds as *Lock values on the same queue, with the same
// leases and fences (semaphore.go); they need one Redis deployment.
//
// # The resource side of fencing
//
// A fence protects only what refuses a stale one. Package guard
// (github.com/dlock-go/dlock/guard) writes to Redis resources (Set, HSet,
// Del, a caller's script) only with a fence at least the highest each
// resource has accepted, in one script, and does the same for rows of a
// database/sql table with a fence column, on PostgreSQL, MySQL/MariaDB and
// SQLite. A refused write matches guard.ErrStaleFence. Both bind to a
// *Lock with For, and use only its Fence and Context.
//
// # Redlock
//
// New with several go-redis clients, one per independent master, runs the
// Redlock algorithm of the Redis guidance behind the same API: a majority
// quorum, validity = TTL - elapsed - drift, and fences that stay increasing
// across nodes. Too few nodes answering is ErrNoQuorum (a *QuorumError
// naming each failed node), not ErrNotObtained. docs/redlock.md says when
// to use it.
//
// # Observability and tokens
//
// Client.SetObserver receives an Event for every acquisition, renewal,
// loss and release (the prometheus subpackage turns them into metrics);
// Client.SetLogger logs the few things no caller sees. Client.Inspect
// reports a lock's holder, TTL, fence and waiters; Client.Attach rebuilds a
// Lock from a token obtained elsewhere. Tokens never appear in errors,
// events, logs or Lock.String.
//
// # The lease
//
// A lock is a lease: when its TTL runs out on the server, anyone may take it.
// Every Lock has a Context whose deadline is the holder's conservative local
// estimate of that moment (the acquire or last renewal's send time, plus the
// TTL, minus a drift margin), so it ends before the server can let anyone
// else in, even if Redis stops answering. It also ends on Unlock, on loss, and
// at the WithMaxHold ceiling; context.Cause tells which (ErrReleased, or
// ErrKeyLost, ErrLeaseExpired or ErrMaxHold, which match ErrLost).
// WithAutoRenew renews the lease every TTL/3 while the lock is held; Do runs
// a function under an auto-renewed lock and reports ErrLost if the lock was
// lost meanwhile. lease.go has the model.
//
// # What it does not guarantee
//
//   - Failover: Redis replicates asynchronously. If a master grants a lock
//     and fails before its replica has the key, the promoted replica grants
//     it again: two holders. Use fences, or Redlock over independent masters,
//     when that matters.
//   - Pauses: a holder that stops (GC pause, SIGSTOP, a slow network) for
//     longer than its TTL resumes believing it holds a lock that someone else
//     now has. No lock service can prevent this on its own; the resource must
//     check the fence.
//   - Clocks: Redis expires keys by its wall clock. A server clock that jumps
//     forward expires locks early. The fence's survival of data loss also
//     rests on server clocks (fence.go explains exactly how).
//
// The lock is a good way to avoid doing work twice. For correctness, let the
// resource check the fence, or make the work idempotent.
//
// # Keys
//
// The lock key is used as given: GET key shows the holder's token, and a key
// set by other means (SET key v NX PX) excludes dlock and the other way
// round. dlock keeps, per key, a fencing counter, a wait queue and a
// release channel under "dlock:" names in the key's cluster hash slot
// (docs/design.md, "The format on Redis"); lock keys may not start with
// "dlock:". The fencing counter expires the grant's TTL plus the fence
// margin (WithFenceMargin) after the last grant, so a released lock leaves
// nothing behind after that.
//
// # Contexts
//
// Every call that talks to Redis honours its context, even with go-redis
// clients that ignore context deadlines (the default): the call returns when
// the context ends, and if Redis grants a lock after the caller has given up,
// dlock releases it in the background instead of leaving it held for a TTL.
//
// # Errors
//
// ErrNotObtained means someone else holds the lock (or the context ended
// while waiting; then the error matches ctx.Err() too). ErrNotHeld means the
// lock is no longer this Lock's. A Redis failure — connection refused,
// timeout, READONLY, NOPERM, OOM — is a *NodeError, which never matches
// either. Bad input matches ErrInvalidArgument; a key used as another
// kind of lock, ErrWrongKind; a semaphore asked for with other permits
// than its holders', ErrPermitMismatch. These usage errors are never a
// *NodeError.
//
// A nil context panics in the caller's goroutine, as the standard
// library's calls do, before any other argument is looked at; so does a
// nil client given to New, Direct or guard.NewRedis. Any other nil
// argument (an Option, a *Lock given to a guard's For, a nil
// *guard.Script, a database handle) is ErrInvalidArgument.
package dlock
