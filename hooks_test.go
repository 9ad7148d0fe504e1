package dlock_test

import (
	"context"
	"errors"
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

// breaker is a user's go-redis hook that, while open, refuses every command
// without sending it (a rate limiter that waits a millisecond for a token,
// then gives up): as a single command and as a pipeline alike, it returns
// its error and does not call next, as go-redis's Hook doc allows.
type breaker struct{ open *atomic.Bool }

var errBreakerOpen = errors.New("breaker open")

// breakerClient returns a client of a server of the test's own with a
// breaker, closed (open is false), and a dlock Client on it.
func breakerClient(t *testing.T) (*redis.Client, *atomic.Bool, *dlock.Client) {
	t.Helper()
	s := redistest.Start(t)
	rdb := redis.NewClient(s.Options())
	t.Cleanup(func() { rdb.Close() })
	open := &atomic.Bool{}
	rdb.AddHook(breaker{open})
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	return rdb, open, c
}

func (breaker) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h breaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.open.Load() {
			time.Sleep(time.Millisecond)
			return errBreakerOpen
		}
		return next(ctx, cmd)
	}
}
func (h breaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.open.Load() {
			time.Sleep(time.Millisecond)
			return errBreakerOpen
		}
		return next(ctx, cmds)
	}
}

// A user's hook that refuses a pipeline without running it (returns an
// error, never calls next) fails dlock's pipelined scripts as it fails a
// lone script: with its error. (They came back with no error and no
// value: "unexpected reply"; found by review.)
func TestAPipelineAHookRefusesFailsItsScriptsWithTheHooksError(t *testing.T) {
	_, open, c := breakerClient(t)
	base := key(t)
	mustLock(t, c, base+":warm").Unlock(ctxT(t))
	open.Store(true)
	if _, err := c.TryLock(ctxT(t), base+":alone"); !errors.Is(err, errBreakerOpen) {
		t.Fatalf("a lone TryLock: %v, not the hook's error", err)
	}
	var wg sync.WaitGroup
	var got, other atomic.Int64
	var mu sync.Mutex
	var examples []string
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				l, err := c.TryLock(ctx, base+":"+string(rune('a'+g%26))+string(rune('a'+i)))
				cancel()
				switch {
				case err == nil:
					got.Add(1)
					l.Unlock(context.Background())
				case !errors.Is(err, errBreakerOpen):
					other.Add(1)
					mu.Lock()
					if len(examples) < 3 {
						examples = append(examples, err.Error())
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if got.Load() > 0 || other.Load() > 0 {
		t.Fatalf("with the hook refusing every command: %d locks obtained, %d errors other than the hook's, e.g. %q", got.Load(), other.Load(), examples)
	}
}

// While a user's hook refuses the pipelines, renewals that dlock pipelines
// fail with its error, as a lone renewal does, and report no lock lost:
// the keys are still held. (Every Extend said ErrNotHeld and ended its
// lock's Context; found by review.)
func TestAPipelineAHookRefusesLosesNoLock(t *testing.T) {
	rdb, open, c := breakerClient(t)
	keys := keysOf(t, 32)
	locks := make([]*dlock.Lock, len(keys))
	for i, k := range keys {
		locks[i] = mustLock(t, c, k, dlock.WithTTL(time.Minute))
	}
	open.Store(true)
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if errs[i] = locks[i].Extend(ctxT(t), time.Minute); errs[i] != nil && !errors.Is(errs[i], errBreakerOpen) {
					return
				}
			}
		}()
	}
	wg.Wait()
	open.Store(false)
	notHeld, lost := 0, 0
	for i, l := range locks {
		if errors.Is(errs[i], dlock.ErrNotHeld) {
			notHeld++
		}
		if l.Context().Err() != nil {
			lost++
		}
	}
	held := 0
	for _, k := range keys {
		if rdb.Exists(ctxT(t), k).Val() == 1 {
			held++
		}
	}
	for _, l := range locks {
		l.Unlock(ctxT(t))
	}
	if notHeld > 0 || lost > 0 {
		t.Fatalf("with the hook refusing the renewals: %d of %d Extend calls said ErrNotHeld and %d Contexts ended, while %d keys were still held on the server (e.g. %v)", notHeld, len(keys), lost, held, errs[0])
	}
}
