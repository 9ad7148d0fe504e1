package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"
)

// The handover (internal/wait/handover.go): a release that hands a mutex to
// a waiter of its own Client gives it the key for its whole TTL, and the
// releaser hands it the lock in this process, without a wake message or a
// confirming acquire. Pays on the hot-key rows of BENCHMARKS.md (docs/design.md, "The handover").
//
// A Client's waiters are named by its prefix (random: newLineOwn) and its
// count of them; a waiter whose grant must be confirmed by its own acquire (one
// that waits for replicas: WithReplicaAck) has a name without the prefix,
// so that no release hands it over.

// newLineOwn returns a Client's waiter name prefix: 16 random hex digits
// and a dot, so that two Clients' waiters never share a name.
func newLineOwn() string { return randomHex(8) + "." }

// newWaiterID returns a waiter's name in the line: the Client's prefix and
// the Client's count of waiters, or, for a waiter that confirms its grant
// itself, 16 random hex digits.
func (c *Client) newWaiterID(o options) string {
	if o.replicas > 0 {
		return randomHex(8)
	}
	return c.nodes[0].own + strconv.FormatUint(c.waiters.Add(1), 36)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// handOver gives waiter id of n's Client, waiting on key, the lock a
// release sent at since handed it, with fence. A waiter gone meanwhile has
// left the line with a release that passed the key on.
func (n *node) handOver(key, id string, fence int64, since time.Time) {
	if n.wakes != nil {
		n.wakes.send(key, id, wake{fence: fence, since: since})
	}
}
