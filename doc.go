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
// On a Redis server that keeps the writes it acknowledged: at most one
// holder within the lease (one atomic SET key token NX PX ttl); no deadlock
// (the key always expires); release and renewal only by the owner (a fresh
// 160-bit token per acquisition, checked and applied in one Lua script);
// and a Fence per grant, greater than every fence issued before it for the
// key, even after Redis lost its data. A failover that loses a grant, a
// pause longer than the lease, a clock that jumps or an evicting
// maxmemory-policy can break exclusion: let the resource refuse a stale
// fence (package guard) where correctness matters. docs/guarantees.md has
// the details.
//
// # Waiting and the lease
//
// Lock waits without polling: on one node, waiters queue in Redis in
// arrival order and the release hands the lock straight to the next live
// one (docs/waiting.md). It waits through a Redis restart or failover until
// its context ends (docs/failures.md). Every Lock has a Context that ends
// before the server can let anyone else in (its deadline is the holder's
// conservative estimate of the lease's end), on Unlock, on loss, and at the
// WithMaxHold ceiling; context.Cause says which (ErrReleased, or ErrKeyLost,
// ErrLeaseExpired or ErrMaxHold, which match ErrLost). WithAutoRenew renews
// the lease every TTL/3; Do runs a function under an auto-renewed lock.
//
// # Beyond one lock
//
// LockAll takes several keys' locks, all or none. Client.Election is a
// leader election (Campaign, Leader, Observe); Client.Semaphore (at most N
// holders) and Client.RWMutex (many readers or one writer) hand out holds
// as *Lock values, with the same leases and fences. New with several
// go-redis clients, one per independent master, runs Redlock behind the
// same API (docs/redlock.md). SetObserver, SetTracer and SetLogger report
// what happens; Inspect reports a lock's holder, owner, TTL, fence and
// waiters. Tokens never appear in errors, events, logs or Lock.String.
//
// # Keys
//
// The lock key is used as given: GET key shows the holder's token. dlock
// keeps, per key, a fencing counter, a queue and a release channel under
// "dlock:" names in the key's cluster hash slot (docs/design.md); lock keys
// may not start with "dlock:".
//
// # Contexts and errors
//
// Every call honours its context, even with go-redis clients that ignore
// context deadlines; a lock granted after its caller gave up is released in
// the background. ErrNotObtained means someone else holds the lock (or the
// context ended while waiting; then the error matches ctx.Err() too).
// ErrNotHeld means the lock is no longer this Lock's. A Redis failure is a
// *NodeError, which matches neither. Bad input matches ErrInvalidArgument;
// a key used as another kind of lock, ErrWrongKind; a semaphore asked for
// with other permits than its holders', ErrPermitMismatch. A nil context
// panics, as in the standard library; so does a nil client given to New or
// Direct. Any other nil argument is ErrInvalidArgument.
package dlock
