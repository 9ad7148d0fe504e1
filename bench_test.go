package dlock_test

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// The floor dlock is measured against: the two round trips any correct
// lock needs, on the same go-redis client: SET NX PX, then a token-checked
// DEL script (loaded once, run by EVALSHA).
var rawRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// fencedAcquire is the least a lock that issues fencing tokens can do to
// acquire: SET NX PX and the hybrid fence (server clock and counter, see
// fence.go) in one script, without dlock's wait queue, notifications or
// anything else. Next to the raw floor it shows what the fence alone costs.
var fencedAcquire = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('PTTL', KEYS[1])
end
local t = redis.call('TIME')
local fence = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local last = tonumber(redis.call('SET', KEYS[2], fence, 'PX', '86400000', 'GET'))
if last and last >= tonumber(fence) then
  fence = string.format('%.0f', last + 1)
  redis.call('SET', KEYS[2], fence, 'PX', '86400000')
end
return fence`)

func BenchmarkRawFloor(b *testing.B) {
	rdb := shared().Client(b)
	ctx := context.Background()
	k := key(b)
	for i := 0; i < b.N; i++ {
		if !rdb.SetNX(ctx, k, "token", 30*time.Second).Val() {
			b.Fatal("SET NX failed")
		}
		if n, err := rawRelease.Run(ctx, rdb, []string{k}, "token").Int(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkFencedFloor runs the fenced floor alone (fencedAcquire and the
// raw floor's release), to profile beside BenchmarkTryLockUnlock.
func BenchmarkFencedFloor(b *testing.B) {
	rdb := shared().Client(b)
	ctx := context.Background()
	k := key(b)
	keys := []string{"{" + k + "}", "{" + k + "}:fence"}
	for i := 0; i < b.N; i++ {
		if _, err := fencedAcquire.Run(ctx, rdb, keys, "token", 30000).Text(); err != nil {
			b.Fatal(err)
		}
		if n, err := rawRelease.Run(ctx, rdb, keys[:1], "token").Int(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkVsRawFloor measures, side by side on the same go-redis client,
// uncontended cycles of the raw floor, of the fenced floor (fencedAcquire
// and the raw floor's release), of dlock's TryLock+Unlock, and of
// Lock+Unlock (whose first attempt is the same acquire script). They run
// interleaved in blocks of 100 cycles, each pass through them starting
// with another, so that the machine's changing load falls on all alike,
// and each block's time is divided by the raw floor's block of the same
// pass. Reported: µs per cycle, and the median of those ratios (1.10
// would be 10% slower than the raw floor), which a burst of outside load
// moves least.
func BenchmarkVsRawFloor(b *testing.B) {
	c, rdb := newClient(b, shared())
	ctx := context.Background()
	kRaw, kFenced, kLock := key(b), key(b), key(b)
	fenced := []string{"{" + kFenced + "}", "{" + kFenced + "}:fence"}
	release := func(k string) {
		if n, err := rawRelease.Run(ctx, rdb, []string{k}, "token").Int(); err != nil || n != 1 {
			b.Fatal(n, err)
		}
	}
	dlockCycle := func(lock func(context.Context, string, ...dlock.Option) (*dlock.Lock, error)) func() {
		return func() {
			l, err := lock(ctx, kLock)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	contenders := []struct {
		name  string
		cycle func()
	}{
		{"raw", func() {
			if !rdb.SetNX(ctx, kRaw, "token", 30*time.Second).Val() {
				b.Fatal("SET NX failed")
			}
			release(kRaw)
		}},
		{"fenced", func() {
			if _, err := fencedAcquire.Run(ctx, rdb, fenced, "token", 30000).Text(); err != nil {
				b.Fatal(err)
			}
			release(fenced[0])
		}},
		{"dlock", dlockCycle(c.TryLock)},
		{"dlock-Lock", dlockCycle(c.Lock)},
	}
	const block = 100
	total := make([]time.Duration, len(contenders))
	server := make([]time.Duration, len(contenders)) // redis-server CPU (INFO cpu)
	client := make([]time.Duration, len(contenders)) // this process's CPU (getrusage)
	ratios := make([][]float64, len(contenders))
	pass := make([]time.Duration, len(contenders))
	for done := 0; done < b.N; done += block {
		// Each pass starts with another contender: a fixed order showed
		// in the costs (bench/, runRounds).
		for j := range contenders {
			i := (j + done/block) % len(contenders)
			cpu0 := serverCPU(rdb)
			own0 := processCPU()
			start := time.Now()
			for k := 0; k < block; k++ {
				contenders[i].cycle()
			}
			pass[i] = time.Since(start)
			client[i] += processCPU() - own0
			server[i] += serverCPU(rdb) - cpu0
			total[i] += pass[i]
		}
		for i, d := range pass {
			ratios[i] = append(ratios[i], float64(d)/float64(pass[0]))
		}
	}
	b.StopTimer()
	cycles := float64(len(ratios[0]) * block)
	for i, ct := range contenders {
		b.ReportMetric(float64(total[i].Microseconds())/cycles, ct.name+"-µs/cycle")
		b.ReportMetric(float64(server[i].Microseconds())/cycles, ct.name+"-server-µs/cycle")
		b.ReportMetric(float64(client[i].Microseconds())/cycles, ct.name+"-client-µs/cycle")
		if i > 0 {
			sort.Float64s(ratios[i])
			b.ReportMetric(ratios[i][len(ratios[i])/2], ct.name+"/raw")
		}
	}
	b.ReportMetric(0, "ns/op")
}

func BenchmarkTryLockUnlock(b *testing.B) {
	c, _ := newClient(b, shared())
	benchCycles(b, c, context.Background())
}

// With a context that can end, every call runs in its own goroutine (see
// await in call.go); this shows what that costs.
func BenchmarkTryLockUnlockWithDeadline(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	c, _ := newClient(b, shared())
	benchCycles(b, c, ctx)
}

// benchCycles runs b.N uncontended TryLock+Unlock cycles of c with ctx.
func benchCycles(b *testing.B, c *dlock.Client, ctx context.Context) {
	k := key(b)
	for i := 0; i < b.N; i++ {
		l, err := c.TryLock(ctx, k)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkContended runs 16 workers, each with its own Client and
// connection, on one key with an empty critical section. ns/op is per
// critical section; wait-p50/p99 are how long Lock took.
func BenchmarkContended(b *testing.B) {
	const workers = 16
	k := key(b)
	clients := make([]*dlock.Client, workers)
	for i := range clients {
		clients[i], _ = newClient(b, shared())
	}
	ctx := context.Background()
	var (
		mu    sync.Mutex
		waits []time.Duration
		wg    sync.WaitGroup
		next  = make(chan struct{}, b.N)
	)
	for i := 0; i < b.N; i++ {
		next <- struct{}{}
	}
	close(next)
	b.ResetTimer()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range next {
				start := time.Now()
				l, err := c.Lock(ctx, k)
				if err != nil {
					b.Error(err)
					return
				}
				waited := time.Since(start)
				if err := l.Unlock(ctx); err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				waits = append(waits, waited)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportWaits(b, waits)
}

// BenchmarkHandoff measures how long a waiter that is already blocked in
// Lock takes to get the lock after the holder's Unlock returns.
func BenchmarkHandoff(b *testing.B) {
	holder, rdb := newClient(b, shared())
	waiter, _ := newClient(b, shared())
	ctx := context.Background()
	k := key(b)
	queue := "dlock:queue:{" + k + "}" // the wait queue (internal/keyspace)
	var handoffs []time.Duration
	for i := 0; i < b.N; i++ {
		l, err := holder.TryLock(ctx, k, dlock.WithTTL(time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan time.Time, 1)
		go func() {
			wl, err := waiter.Lock(ctx, k)
			got <- time.Now()
			if err == nil {
				_ = wl.Unlock(ctx)
			}
		}()
		// Let the waiter subscribe and block.
		for rdb.ZCard(ctx, queue).Val() == 0 {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Millisecond)
		released := time.Now()
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		handoffs = append(handoffs, (<-got).Sub(released))
		// Let the waiter's Unlock finish before the next round.
		for {
			if l, err := holder.TryLock(ctx, k); err == nil {
				_ = l.Unlock(ctx)
				break
			}
		}
	}
	b.StopTimer()
	sort.Slice(handoffs, func(i, j int) bool { return handoffs[i] < handoffs[j] })
	b.ReportMetric(float64(handoffs[len(handoffs)/2].Microseconds()), "handoff-p50-µs")
	b.ReportMetric(float64(handoffs[len(handoffs)*99/100].Microseconds()), "handoff-p99-µs")
}

func reportWaits(b *testing.B, waits []time.Duration) {
	if len(waits) == 0 {
		return
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	b.ReportMetric(float64(waits[len(waits)/2].Microseconds()), "wait-p50-µs")
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "wait-p99-µs")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "wait-max-µs")
}

// BenchmarkRedlockTryLockUnlock is one uncontended cycle over five nodes:
// with parallel fan-out it should cost about one node's round trips.
func BenchmarkRedlockTryLockUnlock(b *testing.B) {
	var ucs []redis.UniversalClient
	for i := 0; i < 5; i++ {
		ucs = append(ucs, redistest.Start(b).Client(b))
	}
	c := dlock.New(ucs...)
	defer c.Close()
	b.ResetTimer()
	benchCycles(b, c, context.Background())
}

// processCPU is this process's CPU time so far (user + system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU reads the redis-server's CPU time so far (user + system).
func serverCPU(rdb *redis.Client) time.Duration {
	info := redistest.Info(rdb, "cpu")
	var d time.Duration
	for _, k := range []string{"used_cpu_user", "used_cpu_sys"} {
		f, _ := strconv.ParseFloat(info[k], 64)
		d += time.Duration(f * float64(time.Second))
	}
	return d
}
