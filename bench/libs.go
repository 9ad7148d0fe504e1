package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlock-go/dlock"
)

// ttl is every library's lock TTL in the benchmarks.
const ttl = 8 * time.Second

// locker is one library, set up against some nodes: lock waits until the
// lock is held (or ctx ends) and returns the function that releases it.
type locker struct {
	name  string
	lock  func(ctx context.Context, key string) (unlock func() error, err error)
	close func()
}

// poolSize is the go-redis pool size of the clients newRedis makes: 128,
// or 0 for go-redis's default (10 per CPU), which the herds use.
var poolSize = 128

func newRedis(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
}

// dlockLock is a locker's lock for the dlock Client c.
func dlockLock(c *dlock.Client) func(ctx context.Context, key string) (func() error, error) {
	return func(ctx context.Context, key string) (func() error, error) {
		l, err := c.Lock(ctx, key, dlock.WithTTL(ttl))
		if err != nil {
			return nil, err
		}
		return func() error { return l.Unlock(context.Background()) }, nil
	}
}

// dlocks are dlock's lockers on addrs: this tree's, and in a paired run
// (make bench-pair) the base build's beside it.
func dlocks(addrs []string) []locker {
	libs := []locker{dlockLocker(addrs)}
	if *transports && len(addrs) == 1 {
		libs = append(libs, dlockTransports(addrs[0])...)
	}
	for _, b := range baseLockers {
		libs = append(libs, b.lock(addrs))
	}
	return libs
}

// dlockTransports are dlock on addr with its scripts sent otherwise than
// by default (-transports): every one through the user's client
// (dlock.Direct: its hooks see all), and through go-redis's AutoPipeliner
// made from the user's client (its hooks fire per command).
func dlockTransports(addr string) []locker {
	direct := newRedis(addr)
	dc := dlock.New(dlock.Direct(direct))
	piped := newRedis(addr)
	ap, err := piped.AutoPipeline()
	if err != nil {
		panic(err)
	}
	pc := dlock.New(ap)
	return []locker{
		{name: "dlock Direct", lock: dlockLock(dc), close: func() { dc.Close(); direct.Close() }},
		{name: "dlock AutoPipeline", lock: dlockLock(pc), close: func() { pc.Close(); ap.Close(); piped.Close() }},
	}
}

// dlockTryLockers are dlock's TryLock lockers on addr, as dlocks.
func dlockTryLockers(addr string) []locker {
	libs := []locker{dlockTryLocker(addr)}
	for _, b := range baseLockers {
		libs = append(libs, b.try(addr))
	}
	return libs
}

// baseLockers is the base build of a paired run (base.go), or nothing.
var baseLockers []struct {
	lock func(addrs []string) locker
	try  func(addr string) locker
}

// dlockTryLocker is dlock's TryLock on one node: measured uncontended
// only (it does not wait), beside Lock, whose first attempt is the same
// script.
func dlockTryLocker(addr string) locker {
	r := newRedis(addr)
	c := dlock.New(r)
	return locker{
		name: "dlock TryLock",
		lock: func(ctx context.Context, key string) (func() error, error) {
			l, err := c.TryLock(ctx, key, dlock.WithTTL(ttl))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Unlock(context.Background()) }, nil
		},
		close: func() { c.Close(); r.Close() },
	}
}

func dlockLocker(addrs []string) locker {
	ucs, closeAll := newRedises(addrs)
	c := dlock.New(ucs...)
	return locker{
		name:  "dlock",
		lock:  dlockLock(c),
		close: func() { c.Close(); closeAll() },
	}
}

// newRedises returns a client (newRedis) for each address, and a function
// that closes them all.
func newRedises(addrs []string) ([]redis.UniversalClient, func()) {
	var ucs []redis.UniversalClient
	for _, a := range addrs {
		ucs = append(ucs, newRedis(a))
	}
	return ucs, func() {
		for _, r := range ucs {
			r.Close()
		}
	}
}

// redislockLocker is bsm/redislock, retrying every millisecond while the
// lock is taken (it has no other way to wait).
func redislockLocker(addr string) locker {
	r := newRedis(addr)
	c := redislock.New(r)
	opts := &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
	return locker{
		name: "bsm/redislock",
		lock: func(ctx context.Context, key string) (func() error, error) {
			l, err := c.Obtain(ctx, key, ttl, opts)
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(context.Background()) }, nil
		},
		close: func() { r.Close() },
	}
}

// redsyncLocker is go-redsync/redsync over the nodes, retrying every
// millisecond (its default is a random 50-250 ms) and never giving up.
func redsyncLocker(addrs []string) locker {
	var pools []redsyncredis.Pool
	var rdbs []*redis.Client
	for _, a := range addrs {
		r := newRedis(a)
		rdbs = append(rdbs, r)
		pools = append(pools, goredis.NewPool(r))
	}
	rs := redsync.New(pools...)
	return locker{
		name: "redsync",
		lock: func(ctx context.Context, key string) (func() error, error) {
			m := rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond))
			if err := m.LockContext(ctx); err != nil {
				return nil, err
			}
			return func() error {
				ok, err := m.UnlockContext(context.Background())
				if err == nil && !ok {
					err = fmt.Errorf("redsync: unlock failed")
				}
				return err
			}, nil
		},
		close: func() {
			for _, r := range rdbs {
				r.Close()
			}
		},
	}
}

// rueidislockLocker is rueidis/rueidislock on one key per lock (KeyMajority
// 1), waiting through client-side caching invalidations.
func rueidislockLocker(addr string) (locker, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: false},
		KeyMajority:    1,
		KeyValidity:    ttl,
		NoLoopTracking: true,
	})
	if err != nil {
		return locker{}, err
	}
	return locker{
		name: "rueidislock",
		lock: func(ctx context.Context, key string) (func() error, error) {
			_, cancel, err := l.WithContext(ctx, key)
			if err != nil {
				return nil, err
			}
			return func() error { cancel(); return nil }, nil
		},
		close: l.Close,
	}, nil
}

// rawRelease is the token-checked delete of the raw floor.
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// rawFloor is the two round trips any correct lock needs, with nothing
// around them: SET NX PX, then a token-checked DEL script. It cannot wait;
// it is measured uncontended only.
func rawFloor(addr string) locker {
	r := newRedis(addr)
	return locker{
		name: "raw floor",
		lock: func(ctx context.Context, key string) (func() error, error) {
			if !r.SetNX(ctx, key, "token", ttl).Val() {
				return nil, fmt.Errorf("raw floor: key taken")
			}
			return func() error { return rawRelease.Run(context.Background(), r, []string{key}, "token").Err() }, nil
		},
		close: func() { r.Close() },
	}
}

// fencedAcquire is the least a lock that issues fencing tokens can do to
// acquire: SET NX PX and the hybrid fence (server clock and counter, see
// fence.go) in one script, without dlock's wait queue or notifications.
var fencedAcquire = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('PTTL', KEYS[1])
end
local t = redis.call('TIME')
local fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local last = tonumber(redis.call('SET', KEYS[2], fence, 'PX', ARGV[3], 'GET'))
if last and last >= tonumber(fence) then
  fence = string.format('%.0f', last + 1)
  redis.call('SET', KEYS[2], fence, 'PX', ARGV[3])
end
return fence`)

// fencedFloor is the raw floor with a fence: fencedAcquire, then the
// token-checked DEL script. Without waiting: uncontended, or one key per
// goroutine.
func fencedFloor(addr string) locker {
	r := newRedis(addr)
	return fenced("fenced floor", r, func() { r.Close() })
}

// fencedFloorPipelined is the fenced floor over go-redis's full-duplex
// AutoPipeliner, as dlock's own commands travel when many goroutines send
// them at once (pipeline.go): the least server CPU a fencing lock's cycle
// can cost under concurrency.
func fencedFloorPipelined(addr string) locker {
	r := newRedis(addr)
	ap, err := r.AutoPipelineWithOptions(&redis.AutoPipelineOptions{FullDuplex: true})
	if err != nil {
		panic(err)
	}
	return fenced("fenced floor, pipelined", ap, func() { ap.Close(); r.Close() })
}

// fenced is a fenced floor over s.
func fenced(name string, s redis.Scripter, close func()) locker {
	keep := (ttl + 10*time.Minute).Milliseconds() // dlock's default fence margin
	return locker{
		name: name,
		lock: func(ctx context.Context, key string) (func() error, error) {
			keys := []string{"{" + key + "}", "{" + key + "}:fence"}
			if err := fencedAcquire.Run(ctx, s, keys, "token", ttl.Milliseconds(), keep).Err(); err != nil {
				return nil, err
			}
			return func() error { return rawRelease.Run(context.Background(), s, keys[:1], "token").Err() }, nil
		},
		close: close,
	}
}
