package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

// memoryKeys is how many distinct keys the memory scenario locks.
const memoryKeys = 20000

// memoryRow is what one library's locks cost Redis in memory: bytes per
// held lock, and bytes per released lock (what stays behind), with the
// keys left after the release and the longest TTL among them.
type memoryRow struct {
	lib            string
	held, released float64 // bytes per lock (used_memory deltas)
	keysLeft       int64
	longestLeft    time.Duration // the longest PTTL among the keys left (-1: one has none)
}

// measureMemory locks memoryKeys distinct keys ("order:1" …) with l from
// 16 goroutines, holds them all, then releases them all, reading
// used_memory on an emptied server before, while held, and after.
func measureMemory(admin *redis.Client, l locker) memoryRow {
	ctx := context.Background()
	admin.FlushAll(ctx)
	before, keys0 := usedMemory(admin), admin.DBSize(ctx).Val()
	unlocks := make([]func() error, memoryKeys)
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < memoryKeys; i += 16 {
				if unlock, err := l.lock(ctx, fmt.Sprintf("order:%d", i+1)); err == nil {
					unlocks[i] = unlock
				}
			}
		}()
	}
	wg.Wait()
	held := usedMemory(admin)
	for _, unlock := range unlocks {
		if unlock != nil {
			_ = unlock()
		}
	}
	time.Sleep(100 * time.Millisecond) // let lazy frees settle
	row := memoryRow{lib: l.name,
		held:     float64(held-before) / memoryKeys,
		released: float64(usedMemory(admin)-before) / memoryKeys,
		keysLeft: admin.DBSize(ctx).Val() - keys0,
	}
	iter := admin.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		switch d := admin.PTTL(ctx, iter.Val()).Val(); {
		case d < 0:
			row.longestLeft = -1
		case row.longestLeft >= 0 && d > row.longestLeft:
			row.longestLeft = d
		}
	}
	admin.FlushAll(ctx)
	return row
}

// usedMemory reads INFO memory's used_memory, in bytes.
func usedMemory(admin *redis.Client) int64 {
	n, _ := strconv.ParseInt(redistest.Info(admin, "memory")["used_memory"], 10, 64)
	return n
}
