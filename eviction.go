package dlock

import (
	"context"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/eviction"
)

// Eviction. Every key dlock writes has a TTL, so under a memory limit
// (maxmemory) every maxmemory-policy but noeviction may evict them: an
// evicted lock key lets a second holder in, an evicted counter or guard
// record a stale fence. A Client asks each node once, in the background
// after its first grant, and warns (its logger, else slog's default) of a
// policy that can evict. A node refusing CONFIG is not warned of: `dlock
// doctor` checks it with a user that may.

// evictionCheckTimeout bounds the background question.
const evictionCheckTimeout = 5 * time.Second

// checkEviction asks every node, once per Client and in work of its own,
// whether its memory policy can evict dlock's keys.
func (c *Client) checkEviction() {
	if c.evictionChecked.Load() || !c.evictionChecked.CompareAndSwap(false, true) {
		return
	}
	c.spawn(func() {
		ctx, cancel := context.WithTimeout(c.ctx, evictionCheckTimeout)
		defer cancel()
		for _, n := range c.nodes {
			if policy, limit, err := eviction.Policy(ctx, n.RDB); err == nil && eviction.Evicts(policy, limit) {
				logger := c.logger.Load()
				if logger == nil {
					logger = slog.Default()
				}
				logger.LogAttrs(ctx, slog.LevelWarn, "dlock: this Redis server may evict lock keys, fencing counters and guard records, which breaks mutual exclusion; set maxmemory-policy noeviction",
					slog.String("node", n.Name), slog.String("maxmemory-policy", policy), slog.Int64("maxmemory", limit))
			}
		}
	})
}
