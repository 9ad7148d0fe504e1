//go:build dlockbase

package main

import (
	"context"

	base "github.com/dlock-go/dlockbase"
)

// In a paired run (make bench-pair), the dlock of another commit, as the
// module github.com/dlock-go/dlockbase, runs beside this tree's as
// "dlock (base)": the same scenarios, the same servers, interleaved.
func init() {
	baseLockers = append(baseLockers, struct {
		lock func(addrs []string) locker
		try  func(addr string) locker
	}{baseLocker, baseTryLocker})
}

func baseLocker(addrs []string) locker {
	ucs, closeAll := newRedises(addrs)
	c := base.New(ucs...)
	return locker{
		name: "dlock (base)",
		lock: func(ctx context.Context, key string) (func() error, error) {
			l, err := c.Lock(ctx, key, base.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Unlock(context.Background()) }, nil
		},
		close: func() { c.Close(); closeAll() },
	}
}

func baseTryLocker(addr string) locker {
	r := newRedis(addr)
	c := base.New(r)
	return locker{
		name: "dlock (base) TryLock",
		lock: func(ctx context.Context, key string) (func() error, error) {
			l, err := c.TryLock(ctx, key, base.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Unlock(context.Background()) }, nil
		},
		close: func() { c.Close(); r.Close() },
	}
}
