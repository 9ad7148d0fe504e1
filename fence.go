package dlock

// Fencing tokens
//
// A lock with a TTL cannot stop a holder that has stopped running: a GC
// pause, a SIGSTOP, a swap storm or a slow network can outlast the lease, and
// the paused holder then resumes believing it still holds the lock while
// someone else does. Asynchronous replication adds a second way to get two
// holders: a master grants the lock, dies before its replica has the key,
// and the promoted replica grants it again. The lock alone cannot prevent
// either. What can is the resource: every grant carries a fence that is
// strictly greater than every fence issued before it for the same key, the
// holder sends its fence with every write, and the resource refuses a write
// whose fence is below the highest it has accepted. The stale holder's writes
// are then refused, whatever it believes.
//
// How dlock issues fences. The acquire script (scripts/acquire.lua) keeps a
// counter per lock key, in a key of the same hash slot (keys.go), and issues
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
// The counter is kept for a day after the grant that last wrote it
// (scripts/prelude.lua): without an expiry it would stay forever for every
// key ever locked. Losing it is safe: the next fence comes from the server
// clock, which has moved on by a day since the counter was written, far
// more than any clock step the counter could have been covering.
