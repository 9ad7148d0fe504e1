package dlock

import "time"

// Fencing tokens
//
// A paused holder, or a failover that lost a grant, can make two holders;
// the lock alone cannot prevent it (docs/fencing.md). The resource can:
// every grant carries a fence strictly greater than every fence issued
// before it for the key, and the resource refuses a lower one.
//
// How dlock issues fences. The scripts that grant (internal/wait's
// scripts/fence.lua, which Redlock's scripts/acquire.lua shares) keep a
// counter per lock key, in a key of the same hash slot (internal/keyspace),
// and issue
//
//	fence = max(counter + 1, server time in microseconds)
//
// in the same atomic step that sets the lock key. While the counter survives,
// fences grow by at least one per grant. The counter can be lost: a restart
// without persistence, FLUSHALL, a failover to a replica that never received
// it, or its own expiry (below). Then the next fence is the server's
// clock, which is above every earlier fence as long as
//
//   - the clock of the server that issues it has not gone back behind the
//     last fence issued for the key (by any server that served the key), and
//   - after a failover, the new master's clock is not behind the old
//     master's by more than the time between the old master's last grant and
//     the new master's first.
//
// Synchronised clocks (NTP, slewing rather than stepping) meet both with a
// wide margin: the time between those two grants includes at least the
// failure detection and promotion, usually seconds. A counter that runs ahead
// of the clock (only possible after the clock went back) is kept and
// continued from, so while it survives no clock assumption is needed at all.
//
// The fence is a number of the order of 10^15 and fits an int64 (and a
// float64 without loss) for the next 250 years.
//
// How long the counter is kept. Without an expiry it would stay forever for
// every key ever locked (at 1,000 new keys a second, a day's counters alone
// take gigabytes). So each grant keeps it for the grant's TTL plus a margin
// (WithFenceMargin, default DefaultFenceMargin), every renewal or Extend
// keeps it at least the new TTL plus the margin from then (so a renewed
// lock's fence stays readable while it is held: an election's term), and a
// Redlock release that raises it keeps it as long from then. It need not
// outlive more than that:
//
//   - While the counter exists, fences grow by one per grant, whatever the
//     clock does.
//   - Once it has expired, at least TTL + margin has passed on the server's
//     clock since it was last written, with the fence f it then held. The
//     next fence is the server's clock, now at least (the clock when f was
//     written) + TTL + margin. The counter is ahead of the clock only by a
//     step back the clock took, so f is at most that clock plus the step.
//     The new fence is above f as long as the clock has not stepped back by
//     more than TTL + margin in all: the margin is the largest clock step
//     back that fences ride out once their counter is gone, on top of the
//     rules above for a counter lost with the server's data.
//   - With Redlock, a release raises a node's counter to the lock's fence,
//     the maximum over several nodes' clocks: the counter may then be
//     ahead of this node's clock by the skew between the nodes as well.
//     The bound becomes: skew plus clock step back under TTL + margin.
//   - A renewed lock's counter lives until TTL + margin after its last
//     renewal, so it outlives the lock by the margin as a grant's does.
//
// A released or expired lock so leaves nothing behind after TTL + margin:
// the lock key expires with its TTL, the counter after the margin, the
// queue keys two seconds after the last waiter's step.

// DefaultFenceMargin is how long a lock's fencing counter outlives the
// grant's TTL when WithFenceMargin is not given: far more than any step
// back NTP makes (it slews, or steps by a fraction of a second), and short
// enough that counters of released locks do not pile up in Redis.
const DefaultFenceMargin = 10 * time.Minute

// MaxFenceMargin is the longest fence margin accepted: a day.
const MaxFenceMargin = 24 * time.Hour
