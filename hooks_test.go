package dlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// scriptCounter is a go-redis hook, as a user's metrics or tracing hook
// would be, that counts the scripts (EVALSHA and EVAL) it sees, alone or in
// a pipeline.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if name := strings.ToLower(cmd.Name()); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
	}
}

func (*scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

// scriptsRun is how many script commands (EVALSHA and EVAL, a NOSCRIPT one
// included) the server has run.
func scriptsRun(admin *redis.Client) int64 {
	return int64(redistest.CommandCalls(admin, "evalsha") + redistest.CommandCalls(admin, "eval"))
}

// hookedServer starts a server of the test's own (so that its command
// counts are the test's alone) and returns a client of it with a counting
// hook, and a client without one to ask the server.
func hookedServer(t *testing.T) (rdb *redis.Client, hook *scriptCounter, admin *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	rdb = redis.NewClient(s.Options())
	t.Cleanup(func() { rdb.Close() })
	hook = &scriptCounter{}
	rdb.AddHook(hook)
	return rdb, hook, s.Client(t)
}

// tryLockAndUnlock has goroutines each take and release their own key
// cycles times with TryLock and Unlock, as fast as they can.
func tryLockAndUnlock(t *testing.T, c *dlock.Client, goroutines, cycles int) {
	t.Helper()
	base := key(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := fmt.Sprintf("%s:%d", base, g)
			for range cycles {
				l, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Minute))
				if err != nil {
					t.Error(err)
					return
				}
				if err := l.Unlock(ctxT(t)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// Through dlock.Direct, a hook added to the user's client sees every
// script dlock runs, under any concurrency: as many as the server ran, and
// at least one per TryLock and one per Unlock (README.md, docs/operating.md).
func TestAHookSeesEveryScriptThroughDirect(t *testing.T) {
	rdb, hook, admin := hookedServer(t)
	c := dlock.New(dlock.Direct(rdb))
	t.Cleanup(func() { c.Close() })
	before := scriptsRun(admin)
	tryLockAndUnlock(t, c, 50, 10)
	ran := scriptsRun(admin) - before
	t.Logf("Direct: the hook saw %d scripts; the server ran %d", hook.n.Load(), ran)
	if seen := hook.n.Load(); seen != ran || seen < 50*10*2 {
		t.Fatalf("the hook saw %d scripts, the server ran %d, for %d TryLock+Unlock", seen, ran, 50*10)
	}
}

// By default, on a plain *redis.Client, a hook added to it sees every
// script dlock runs too: a lone one through its ProcessHook, and those
// dlock pipelines while more than four run at once through its
// ProcessPipelineHook, since the pipelines are the user's client's own
// (README.md, docs/operating.md).
func TestAHookSeesEveryScriptByDefault(t *testing.T) {
	rdb, hook, admin := hookedServer(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	for _, goroutines := range []int{1, 50} {
		hook.n.Store(0)
		before := scriptsRun(admin)
		tryLockAndUnlock(t, c, goroutines, 10)
		seen, ran := hook.n.Load(), scriptsRun(admin)-before
		t.Logf("default, %d goroutines: the hook saw %d scripts; the server ran %d", goroutines, seen, ran)
		if seen != ran || seen < int64(goroutines*10*2) {
			t.Fatalf("%d goroutines: the hook saw %d scripts, the server ran %d", goroutines, seen, ran)
		}
	}
}

// processOnly gives a test's go-redis hook that has only a ProcessHook the
// other two, passing through.
type processOnly struct{}

func (processOnly) DialHook(next redis.DialHook) redis.DialHook { return next }

func (processOnly) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
