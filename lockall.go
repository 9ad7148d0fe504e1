package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// LockAll obtains the locks on all keys, or none, waiting as Lock does
// until ctx ends. It returns the locks in the order of keys, each a Lock
// like Lock's (opts apply to each): release them all when done (UnlockAll).
//
// Callers never deadlock, whatever order they name the keys in: every
// LockAll takes its keys sorted, and waits only for a key above every key
// it holds, so no cycle can form. On a Redis Cluster each key is locked in
// its own slot. If any key cannot be had (ctx ends, a Redis failure), the
// locks obtained are released at once and the error names the key. Use a
// TTL covering the whole wait, or WithAutoRenew, lest the first keys lapse.
// Write each key's resource with that key's lock's fence, as any holder's
// (docs/stock.md).
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...Option) ([]*Lock, error) {
	needContext(ctx)
	order, err := c.lockOrder(keys, opts)
	if err != nil {
		return nil, err
	}
	locks := make([]*Lock, len(keys))
	for _, i := range order {
		l, err := c.Lock(ctx, keys[i], opts...)
		if err != nil {
			c.releaseAll(locks)
			return nil, fmt.Errorf("LockAll: %q: %w", keys[i], err)
		}
		locks[i] = l
	}
	return locks, nil
}

// lockOrder checks LockAll's input and returns keys' indices in lock order.
func (c *Client) lockOrder(keys []string, opts []Option) ([]int, error) {
	if len(keys) == 0 {
		return nil, invalid("LockAll needs at least one key")
	}
	order := make([]int, len(keys))
	for i, k := range keys {
		if _, err := c.prepare(k, opts); err != nil {
			return nil, err
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	for j := 1; j < len(order); j++ {
		if keys[order[j]] == keys[order[j-1]] {
			return nil, invalid("key %q named twice", keys[order[j]])
		}
	}
	return order, nil
}

// UnlockAll releases locks (nil ones are skipped), as each one's Unlock
// does, and returns the errors joined, each naming its key: LockAll's
// counterpart. It releases every lock even when some fail, and the locks
// may come from any Client (each is released through its own).
func (c *Client) UnlockAll(ctx context.Context, locks []*Lock) error {
	needContext(ctx)
	var errs []error
	for _, l := range locks {
		if l == nil {
			continue
		}
		if err := l.Unlock(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", l.Key(), err))
		}
	}
	return errors.Join(errs...)
}

// releaseAll gives back the locks a failed LockAll obtained, on a fresh
// context: the caller's may have ended.
func (c *Client) releaseAll(locks []*Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_ = c.UnlockAll(ctx, locks)
}
