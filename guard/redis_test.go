package guard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
)

// logWrite appends its fence to the resource (a list) in the guarded step,
// so the list is the order in which the guard accepted writes.
var logWrite = guard.NewScript(`return redis.call('RPUSH', KEYS[1], ARGV[1])`)

// Concurrent writers with interleaved fences: whatever the interleaving,
// the accepted fences never go down, every refusal names a higher fence,
// and the highest fence's write is the last one standing.
func TestConcurrentGuardedWritesNeverLetALowerFenceLand(t *testing.T) {
	rdb := shared.Client(t)
	g := guard.NewRedis(rdb)
	res, val := key(t), key(t)+":value"
	const writers, each = 16, 40
	var wg sync.WaitGroup
	var mu sync.Mutex
	var highest int64
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				fence := 1 + rand.Int64N(writers*each)
				_, err := g.Run(ctxT(t), logWrite, fence, []string{res}, fence)
				var stale *guard.StaleFenceError
				switch {
				case err == nil:
					mu.Lock()
					highest = max(highest, fence)
					mu.Unlock()
				case errors.As(err, &stale) && errors.Is(err, guard.ErrStaleFence):
					if stale.Highest <= fence || stale.Fence != fence || stale.Resource != res {
						t.Errorf("refusal %+v for fence %d", stale, fence)
					}
				default:
					t.Error(err)
				}
				if err := g.Set(ctxT(t), val, fence, fence, 0); err != nil && !errors.Is(err, guard.ErrStaleFence) {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	log, err := rdb.LRange(ctxT(t), res, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	for i, s := range log {
		f, _ := strconv.ParseInt(s, 10, 64)
		if f < last {
			t.Fatalf("write %d landed with fence %d after %d", i, f, last)
		}
		last = f
	}
	if last != highest {
		t.Fatalf("last accepted %d, highest accepted %d", last, highest)
	}
	if h, err := g.Highest(ctxT(t), res); err != nil || h != highest {
		t.Fatalf("Highest = %d, %v; want %d", h, err, highest)
	}
	v, _ := rdb.Get(ctxT(t), val).Int64()
	if hv, _ := g.Highest(ctxT(t), val); v != hv {
		t.Fatalf("the value is %d, the highest fence written %d", v, hv)
	}
}

// The seeds' case: a holder pauses past its TTL, another takes the lock
// and writes; the first one's late write is refused.
func TestAPausedHoldersLateWriteIsRefused(t *testing.T) {
	c, rdb := newClient(t, shared)
	g := guard.NewRedis(rdb)
	k, res := key(t), key(t)+":account"
	old := mustLock(t, c, k, dlock.WithTTL(100*time.Millisecond))
	if err := g.For(old).Set(ctxT(t), res, "100", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old lease ends", func() bool { return old.Context().Err() != nil })
	cur, err := c.Lock(ctxT(t), k, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.For(cur).Set(ctxT(t), res, "90", 0); err != nil {
		t.Fatal(err)
	}
	// The paused holder, unaware, writes with its fence.
	err = g.Set(ctxT(t), res, old.Fence(), "110", 0)
	if !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("late write: %v", err)
	}
	// Bound to its Lock, the write is not even sent.
	if err := g.For(old).Set(ctxT(t), res, "110", 0); err == nil || !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("bound late write: %v", err)
	}
	if v, _ := rdb.Get(ctxT(t), res).Result(); v != "90" {
		t.Fatalf("the resource holds %q", v)
	}
}

// A holder whose lease ended (it paused past its TTL) gets, for a guarded
// write, an error matching dlock.ErrLost and not guard.ErrStaleFence, and
// nothing is sent: whether or not the next holder has written yet. Code
// that checks ErrStaleFence alone would carry on as if it had written
// (docs/fencing.md lists what a guarded write returns). After Unlock the
// error is dlock.ErrReleased, which does not match ErrLost.
func TestAGuardedWriteAfterTheLeaseExpiredMatchesErrLostNotErrStaleFence(t *testing.T) {
	c, rdb := newClient(t, shared)
	g := guard.NewRedis(rdb)
	k, res := key(t), key(t)+":order"
	old := mustLock(t, c, k, dlock.WithTTL(100*time.Millisecond))
	eventually(t, "the old lease ends", func() bool { return old.Context().Err() != nil })
	late := func(when string) {
		t.Helper()
		err := g.For(old).Set(ctxT(t), res, "paid", 0)
		if !errors.Is(err, dlock.ErrLost) || errors.Is(err, guard.ErrStaleFence) || !strings.Contains(err.Error(), "not sent") {
			t.Fatalf("%s: a guarded write past the lease: %v, want ErrLost (not sent), not ErrStaleFence", when, err)
		}
		if n := rdb.Exists(ctxT(t), res).Val(); n != 0 {
			t.Fatalf("%s: the late write landed", when)
		}
	}
	late("no one holds the lock")
	cur, err := c.Lock(ctxT(t), k, dlock.WithTTL(time.Minute)) // once the key has expired on Redis too
	if err != nil {
		t.Fatal(err)
	}
	late("the next holder has not written")
	if err := g.For(cur).Set(ctxT(t), res+":other", "x", 0); err != nil {
		t.Fatal(err)
	}
	late("the next holder has written elsewhere")
	if err := cur.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	err = g.For(cur).Set(ctxT(t), res, "paid", 0)
	if !errors.Is(err, dlock.ErrReleased) || errors.Is(err, dlock.ErrLost) || errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("a guarded write after Unlock: %v, want ErrReleased", err)
	}
}

// refuses the one whose fences are lower, as guard.go says.
func TestFencesOfAnotherLockAreComparedAsNumbers(t *testing.T) {
	c, rdb := newClient(t, shared)
	g := guard.NewRedis(rdb)
	res := key(t) + ":shared-resource"
	first := mustLock(t, c, key(t)+":a", dlock.WithTTL(time.Minute))
	later := mustLock(t, c, key(t)+":b", dlock.WithTTL(time.Minute))
	if later.Fence() <= first.Fence() {
		t.Skipf("fences %d, %d: the server clock went back", first.Fence(), later.Fence())
	}
	if err := g.For(later).Set(ctxT(t), res, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.For(first).Set(ctxT(t), res, "a", 0); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("the other lock's lower fence: %v", err)
	}
}

func TestGuardedWritesRefuseBadInput(t *testing.T) {
	g := guard.NewRedis(shared.Client(t))
	ctx := ctxT(t)
	for name, err := range map[string]error{
		"fence 0":         g.Set(ctx, "k", 0, "v", 0),
		"negative fence":  g.Set(ctx, "k", -5, "v", 0),
		"empty key":       g.Set(ctx, "", 1, "v", 0),
		"reserved key":    g.Del(ctx, "dlock:fence:{k}", 1),
		"negative TTL":    g.Set(ctx, "k", 1, "v", -time.Second),
		"odd HSet":        func() error { _, err := g.HSet(ctx, "k", 1, "field"); return err }(),
		"no HSet fields":  func() error { _, err := g.HSet(ctx, "k", 1); return err }(),
		"script, no keys": func() error { _, err := g.Run(ctx, logWrite, 1, nil); return err }(),
		"Highest, empty":  func() error { _, err := g.Highest(ctx, ""); return err }(),
	} {
		if !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n, _ := shared.Client(t).Exists(ctx, "k").Result(); n != 0 {
		t.Fatal("a refused call wrote")
	}
}

// Fences above 2^53 (where Lua's numbers lose precision) compare exactly.
func TestGuardComparesLargeFencesExactly(t *testing.T) {
	g := guard.NewRedis(shared.Client(t))
	res := key(t)
	const big = int64(1)<<53 + 1
	if err := g.Set(ctxT(t), res, big, "x", 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctxT(t), res, big-1, "y", 0); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("fence 2^53 after 2^53+1: %v", err)
	}
	if err := g.Set(ctxT(t), res, big, "z", 0); err != nil {
		t.Fatalf("the same fence again: %v", err)
	}
	if h, _ := g.Highest(ctxT(t), res); h != big {
		t.Fatalf("Highest %d", h)
	}
}

// The record lives as long as its resource and the retention after it.
func TestTheGuardRecordLivesWithItsResource(t *testing.T) {
	rdb := shared.Client(t)
	g := guard.NewRedis(rdb).WithRetention(200 * time.Millisecond)
	ctx := ctxT(t)
	recTTL := func(res string) time.Duration {
		t.Helper()
		var ttl time.Duration
		for _, k := range scanAll(t, rdb, "dlock:guard:*") {
			if len(k) > len(res) && k[len(k)-len(res)-1:] == "{"+res || k == "dlock:guard:{"+res+"}" {
				ttl, _ = rdb.PTTL(ctx, k).Result()
			}
		}
		return ttl
	}
	forever := key(t)
	if err := g.Set(ctx, forever, 5, "v", 0); err != nil {
		t.Fatal(err)
	}
	if ttl := recTTL(forever); ttl != -1 {
		t.Fatalf("a resource without expiry: record TTL %v, want none", ttl)
	}
	if err := g.Del(ctx, forever, 5); err != nil {
		t.Fatal(err)
	}
	if ttl := recTTL(forever); ttl <= 0 || ttl > 200*time.Millisecond {
		t.Fatalf("after Del: record TTL %v, want the retention", ttl)
	}
	if err := g.Set(ctx, forever, 4, "stale", 0); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("a stale write after Del: %v", err)
	}
	cache := key(t)
	if err := g.Set(ctx, cache, 7, "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if ttl := recTTL(cache); ttl <= time.Minute || ttl > time.Minute+200*time.Millisecond {
		t.Fatalf("a resource with a TTL of a minute: record TTL %v", ttl)
	}
	// Once both are gone, a write is let in: the documented limit.
	short := key(t)
	if err := g.Set(ctx, short, 9, "v", 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the record expires", func() bool { h, _ := g.Highest(ctx, short); return h == 0 })
	if err := g.Set(ctx, short, 3, "after", 0); err != nil {
		t.Fatalf("after the retention: %v", err)
	}
}

func scanAll(t *testing.T, rdb *redis.Client, pattern string) []string {
	t.Helper()
	keys, err := rdb.Keys(ctxT(t), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// A guarded script sees its own KEYS and ARGV and nothing of the guard's;
// a flags line stays first; its fence is recorded even when it fails
// after writing (Redis keeps what it wrote), so a lower fence cannot undo
// that write.
func TestAGuardedScriptSeesOnlyItsOwnArguments(t *testing.T) {
	g := guard.NewRedis(shared.Client(t))
	res := key(t)
	counts := guard.NewScript("#!lua flags=allow-cross-slot-keys\nreturn {#KEYS, #ARGV, KEYS[1], ARGV[2], select('#', ...), 'nil', 'nil'}")
	got, err := g.Run(ctxT(t), counts, 10, []string{res}, "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if r := got.([]any); len(r) != 7 || r[0] != int64(1) || r[1] != int64(2) || r[2] != res || r[3] != "b" || r[4] != int64(0) || r[5] != "nil" || r[6] != "nil" {
		t.Fatalf("the script saw %v", r)
	}
	peek := guard.NewScript(`local ok, v = pcall(function() return admitted end) return type(v) == 'function' and 1 or 0`)
	if v, err := g.Run(ctxT(t), peek, 10, []string{res}); err != nil || v != int64(0) {
		t.Fatalf("the script saw the guard's functions: %v, %v", v, err)
	}
	failing := guard.NewScript(`redis.call('SET', KEYS[1], 'by-20') return redis.error_reply('ERR a later step failed')`)
	if _, err := g.Run(ctxT(t), failing, 20, []string{res}); err == nil || err.Error() != "ERR a later step failed" {
		t.Fatalf("the script's own error: %v", err)
	}
	if err := g.Set(ctxT(t), res, 15, "by-15", 0); !errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("a lower fence after a failed script that wrote: %v", err)
	}
	raising := guard.NewScript(`redis.call('SET', KEYS[1], 'by-30') return redis.call('INCR', KEYS[1])`)
	if _, err := g.Run(ctxT(t), raising, 30, []string{res}); err == nil {
		t.Fatal("INCR of a string succeeded")
	}
	if h, _ := g.Highest(ctxT(t), res); h != 30 {
		t.Fatalf("after a script that raised, Highest %d, want 30", h)
	}
	fake := guard.NewScript(`return redis.error_reply('DLOCKSTALE 99')`)
	if _, err := g.Run(ctxT(t), fake, 40, []string{res}); err == nil || errors.Is(err, guard.ErrStaleFence) {
		t.Fatalf("the script's own DLOCKSTALE reply read as the guard's: %v", err)
	}
}

func TestGuardedScriptsRefuseWhatTheyCannotGuard(t *testing.T) {
	defer func() {
		if err, _ := recover().(error); !errors.Is(err, dlock.ErrInvalidArgument) {
			t.Fatalf("a no-writes script: %v", err)
		}
	}()
	g := guard.NewRedis(shared.Client(t))
	if _, err := g.Run(ctxT(t), logWrite, 1, []string{key(t), "dlock:guard:{x}"}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("a reserved second key: %v", err)
	}
	guard.NewScript("#!lua flags=no-writes\nreturn 1")
}

// Long argument lists pass, as they would without the guard.
func TestGuardedWritesTakeLongArgumentLists(t *testing.T) {
	rdb := shared.Client(t)
	g := guard.NewRedis(rdb)
	var pairs []any
	for i := 0; i < 5000; i++ {
		pairs = append(pairs, strconv.Itoa(i), i)
	}
	if n, err := g.HSet(ctxT(t), key(t), 1, pairs...); err != nil || n != 5000 {
		t.Fatalf("HSet of 5000 fields: %d, %v", n, err)
	}
	count := guard.NewScript(`return #ARGV`)
	args := make([]any, 20000)
	for i := range args {
		args[i] = i
	}
	if n, err := g.Run(ctxT(t), count, 1, []string{key(t)}, args...); err != nil || n != int64(20000) {
		t.Fatalf("a script with 20000 arguments: %v, %v", n, err)
	}
}

// On a cluster the record lives in its resource's slot, whatever the key.
func TestTheGuardWorksOnACluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rdb := cl.Client(t)
	g := guard.NewRedis(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, res := range []string{"order:1", "user:{42}:profile", "x{}y", "}{", "{a}{b}"} {
		if err := g.Set(ctx, res, int64(10+i), "v", 0); err != nil {
			t.Fatalf("%s: %v", res, err)
		}
		if err := g.Set(ctx, res, int64(9+i), "v", 0); !errors.Is(err, guard.ErrStaleFence) {
			t.Fatalf("%s stale: %v", res, err)
		}
	}
	both := guard.NewScript(`redis.call('SET', KEYS[1], ARGV[1]) return redis.call('SET', KEYS[2], ARGV[1])`)
	if _, err := g.Run(ctx, both, 5, []string{"{acct:7}:balance", "{acct:7}:history"}, "x"); err != nil {
		t.Fatal(err)
	}
}

// A guarded write made the moment the lease's deadline passes is not sent,
// though the lease's timer may not have run yet and no new holder has
// written: the guard looks at the clock itself.
func TestAGuardedWriteIsNotSentPastTheLeaseDeadline(t *testing.T) {
	c, rdb := newClient(t, shared)
	g := guard.NewRedis(rdb)
	for i := 0; i < 30; i++ {
		k := key(t)
		l := mustLock(t, c, k, dlock.WithTTL(30*time.Millisecond))
		dl, _ := l.Context().Deadline()
		for time.Now().Before(dl) {
		}
		err := g.For(l).Set(ctxT(t), k+":res", "late", time.Minute)
		if !errors.Is(err, dlock.ErrLeaseExpired) {
			t.Fatalf("round %d: write %v past the deadline: %v, want ErrLeaseExpired", i, time.Since(dl), err)
		}
		if n := rdb.Exists(ctxT(t), k+":res").Val(); n != 0 {
			t.Fatalf("round %d: the late write landed", i)
		}
	}
}

// A guarded script that raises after it wrote leaves its record with the
// resource's expiry (plus the retention), as a script that returns does;
// one that raises DLOCKSTALE itself is not taken for the guard's refusal.
func TestAGuardedScriptThatRaisesAfterWritingIsRecordedAsAWrite(t *testing.T) {
	rdb := shared.Client(t)
	g := guard.NewRedis(rdb).WithRetention(time.Minute)
	res := key(t)
	raising := guard.NewScript(`redis.call('SET', KEYS[1], 'x', 'PX', 60000) error({err = 'ERR raised after writing'})`)
	if _, err := g.Run(ctxT(t), raising, 5, []string{res}); err == nil || !strings.Contains(err.Error(), "raised after writing") {
		t.Fatalf("the script's raise: %v", err)
	}
	if pttl := rdb.PTTL(ctxT(t), "dlock:guard:{"+res+"}").Val(); pttl < time.Minute {
		t.Fatalf("the record's PTTL after a raise: %v, want the resource's minute plus the retention", pttl)
	}
	for _, src := range []string{
		`redis.call('SET', KEYS[1], 'y') error({err = 'DLOCKSTALE 99'})`,
		`redis.call('SET', KEYS[1], 'z') error('DLOCKSTALE 99', 0)`,
	} {
		_, err := g.Run(ctxT(t), guard.NewScript(src), 6, []string{res})
		if err == nil || errors.Is(err, guard.ErrStaleFence) {
			t.Fatalf("%s: %v, read as the guard's refusal though the write landed", src, err)
		}
	}
	if _, err := g.Run(ctxT(t), nil, 7, []string{res}); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("a nil script: %v", err)
	}
	if _, err := g.For(nil).Run(ctxT(t), raising, nil); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("a script without keys, by a guard bound to a nil Lock: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !errors.Is(r.(error), dlock.ErrInvalidArgument) {
				t.Fatalf("NewRedis of a typed nil client: %v, want a panic with ErrInvalidArgument", r)
			}
		}()
		guard.NewRedis((*redis.Client)(nil))
	}()
	if err := g.For(nil).Set(ctxT(t), res, "v", 0); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatalf("a guard bound to a nil Lock: %v", err)
	}
}

// A guarded script's errors reach the caller as the script alone would
// send them: a server's reply with its own code, the caller's own code,
// a Lua error as ERR (found by review: each came back prefixed with ERR,
// and a non-string error broke the guard's script).
func TestAGuardedScriptsErrorsAreItsOwn(t *testing.T) {
	rdb := shared.Client(t)
	g := guard.NewRedis(rdb)
	res := key(t)
	rdb.Set(ctxT(t), res+":s", "x", 0)
	for _, c := range []struct{ src, prefix string }{
		{`return redis.call('HSET', KEYS[2], 'a', 'b')`, "WRONGTYPE "},
		{`return redis.call('INCR', KEYS[2])`, "ERR "},
		{`error({err = 'MYCODE mine'})`, "MYCODE mine"},
		{`return {err = 'MYCODE returned'}`, "MYCODE returned"},
		{`error({err = {}})`, "ERR "},
		{`local x = nil; return x.y`, "ERR "},
	} {
		_, err := g.Run(ctxT(t), guard.NewScript(c.src), 3, []string{res, res + ":s"})
		if err == nil || !strings.HasPrefix(err.Error(), c.prefix) || strings.HasPrefix(err.Error(), "ERR ERR") || strings.HasPrefix(err.Error(), "ERR WRONGTYPE") {
			t.Errorf("%s: %v, want an error starting %q", c.src, err, c.prefix)
		}
	}
}
