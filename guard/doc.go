// Package guard is the resource side of fencing: it lets a write reach a
// resource only with a fence at least the highest the resource has
// accepted, so that a holder whose lock has passed to someone else is
// refused. Redis guards resources in Redis; SQLTable guards rows of a
// database/sql table. Both take the fence from a dlock.Lock (For) or as a
// number.
//
// A fence only protects what refuses a stale one. A Redis guard keeps, beside a
// resource in Redis, the highest fence any guarded write to it was
// accepted with, and lets a write through only if its fence is at least
// that: the check, the write and the new record are one script, so no
// other write comes between them (a check and a write sent apart are the
// classic mistake: a stale holder passes the check, pauses, then writes).
// "At least" lets a holder write more than once under one grant. Fences
// are compared as numbers, exactly, for every int64 (scripts/guard_prelude.lua).
//
// One resource, one lock: fences are numbered per lock key, so a resource
// written under the fences of two different locks compares unrelated
// numbers, and the lower lock's writes are refused for as long as the
// other's record stands. Guard each resource by one lock (or one
// election, or the write holds of one RWMutex). Semaphore permits and read
// holds are shared by design: writes under them refuse each other.
//
// Lifetime. The record (dlock:guard:{…}, in the resource's hash slot)
// lives as long as the resource does and a retention after it, as the
// resource stood at the last guarded write: without expiry while the
// resource has none; until the resource's expiry plus the retention while
// it has one; for the retention once it is gone (after a guarded Del, or
// when it expired). An unguarded command that changes the resource's
// expiry (PERSIST, EXPIRE) does not move the record's: one more reason to
// send every write through the guard. A holder whose write arrives after
// the resource and its record are both gone is let in: it must have been
// stale for longer than the retention (default an hour; WithRetention).
// Data loss on the resource's Redis (a restart without persistence, a
// failover to a replica that missed the record) loses the record with the
// data it guarded; the fences themselves keep growing (see dlock's Lock.Fence).
package guard
