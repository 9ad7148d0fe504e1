// Package eviction reads whether a Redis server may evict keys with a TTL:
// every key dlock writes has one, and an evicted lock key lets a second
// holder in. The Client warns of it (the root's eviction.go), and `dlock
// doctor` checks it (internal/doctor).
package eviction

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Policy reads a server's maxmemory-policy and maxmemory (CONFIG
// GET); err is the server's refusal (a redis.Error: an ACL, a renamed
// command) or a failure to answer.
func Policy(ctx context.Context, rdb interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}) (policy string, limit int64, err error) {
	reply, err := rdb.Do(ctx, "CONFIG", "GET", "maxmemory*").Result()
	if err != nil {
		return "", 0, err
	}
	vals := map[string]string{}
	switch r := reply.(type) {
	case map[any]any: // RESP3
		for k, v := range r {
			ks, _ := k.(string)
			vals[ks], _ = v.(string)
		}
	case []any: // RESP2: name, value, ...
		for i := 0; i+1 < len(r); i += 2 {
			ks, _ := r[i].(string)
			vals[ks], _ = r[i+1].(string)
		}
	}
	policy, found := vals["maxmemory-policy"]
	if limit, err = strconv.ParseInt(vals["maxmemory"], 10, 64); err != nil || !found {
		return "", 0, fmt.Errorf("unexpected reply to CONFIG GET maxmemory*: %v", reply)
	}
	return policy, limit, nil
}

// Evicts reports whether a server with policy and a memory limit of limit
// bytes may evict a key that has a TTL: every policy but noeviction may,
// under a limit.
func Evicts(policy string, limit int64) bool {
	return limit > 0 && policy != "noeviction"
}
