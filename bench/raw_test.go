package bench

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// BenchmarkRawFloor is the two round trips any correct lock needs, on one
// go-redis client: SET NX PX, then a token-checked DEL script.
func BenchmarkRawFloor(b *testing.B) {
	rdb := clients(b, 1)[0]
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if !rdb.SetNX(ctx, "bench:raw", "token", 8*time.Second).Val() {
			b.Fatal("SET NX failed")
		}
		if n, err := rawRelease.Run(ctx, rdb, []string{"bench:raw"}, "token").Int(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}
