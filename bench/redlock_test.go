// Package bench compares dlock with its peers on the same redis-server
// processes. It is a separate module so that the peers never become
// dependencies of dlock itself.
package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// nodes are five independent redis-server masters on loopback, started for
// the run.
var nodes []*redistest.Server

func TestMain(m *testing.M) {
	for i := 0; i < 5; i++ {
		s, err := redistest.Spawn()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		nodes = append(nodes, s)
	}
	code := m.Run()
	for _, s := range nodes {
		s.Close()
	}
	os.Exit(code)
}

func clients(b *testing.B, n int) []*redis.Client {
	var out []*redis.Client
	for _, s := range nodes[:n] {
		c := redis.NewClient(&redis.Options{Addr: s.Addr()})
		b.Cleanup(func() { c.Close() })
		out = append(out, c)
	}
	return out
}

// BenchmarkRedlockCycle is one uncontended acquire + release: over one node
// and over five (Redlock), for dlock and redsync. Parallel fan-out should
// make five nodes cost about one node's round trips, not five times them.
func BenchmarkRedlockCycle(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprintf("dlock/nodes=%d", n), func(b *testing.B) {
			var ucs []redis.UniversalClient
			for _, c := range clients(b, n) {
				ucs = append(ucs, c)
			}
			locks := dlock.New(ucs...)
			defer locks.Close()
			ctx := context.Background()
			key := fmt.Sprintf("bench:dlock:%d", n)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := locks.TryLock(ctx, key, dlock.WithTTL(8*time.Second))
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("redsync/nodes=%d", n), func(b *testing.B) {
			var pools []redsyncredis.Pool
			for _, c := range clients(b, n) {
				pools = append(pools, goredis.NewPool(c))
			}
			rs := redsync.New(pools...)
			ctx := context.Background()
			m := rs.NewMutex(fmt.Sprintf("bench:redsync:%d", n), redsync.WithTries(1), redsync.WithExpiry(8*time.Second))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := m.TryLockContext(ctx); err != nil {
					b.Fatal(err)
				}
				if ok, err := m.UnlockContext(ctx); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
