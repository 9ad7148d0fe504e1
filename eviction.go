package dlock

import (
	"context"
	"log/slog"
	"strconv"
	"time"
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
			if policy, limit, ok := n.evictionPolicy(ctx); ok && evicts(policy, limit) {
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

// evicts reports whether a server with policy and a memory limit of limit
// bytes may evict a key that has a TTL.
func evicts(policy string, limit int64) bool {
	return limit > 0 && policy != "noeviction"
}

// evictionPolicy reads the node's maxmemory-policy and maxmemory; ok is
// false when it cannot (CONFIG refused, or no answer).
func (n *node) evictionPolicy(ctx context.Context) (policy string, limit int64, ok bool) {
	reply, err := n.RDB.Do(ctx, "CONFIG", "GET", "maxmemory*").Result()
	if err != nil {
		return "", 0, false
	}
	vals := map[string]string{}
	switch r := reply.(type) {
	case map[any]any: // RESP3
		for k, v := range r {
			ks, _ := k.(string)
			vs, _ := v.(string)
			vals[ks] = vs
		}
	case []any: // RESP2: name, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			ks, _ := r[i].(string)
			vs, _ := r[i+1].(string)
			vals[ks] = vs
		}
	}
	limit, err = strconv.ParseInt(vals["maxmemory"], 10, 64)
	policy, found := vals["maxmemory-policy"]
	return policy, limit, err == nil && found
}
