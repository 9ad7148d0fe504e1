package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// faulty wraps a client and fails the script calls it is told to, the way
// a test's fault injector or an instrumented client wraps one.
type faulty struct {
	dlock.RedisClient
	fail    atomic.Int64 // how many script calls to fail from now
	scripts atomic.Int64 // script calls seen
}

var errInjected = errors.New("injected fault")

func (f *faulty) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	f.scripts.Add(1)
	if f.fail.Add(-1) >= 0 {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errInjected)
		return cmd
	}
	return f.RedisClient.EvalSha(ctx, sha, keys, args...)
}

func TestAWrappedClientLocksWaitsAndSeesItsFaults(t *testing.T) {
	f := &faulty{RedisClient: shared().Client(t)}
	c := dlock.New(f)
	defer c.Close()
	k := key(t)

	f.fail.Store(1)
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, errInjected) {
		t.Fatalf("TryLock through a failing wrapper: %v, want the injected fault", err)
	}
	l := mustLock(t, c, k)
	got := make(chan error, 1)
	go func() {
		w, err := c.Lock(ctxT(t), k) // waits in the queue, through the wrapper's subscription
		if err == nil {
			err = w.Unlock(ctxT(t))
		}
		got <- err
	}()
	eventually(t, "the waiter queued", func() bool {
		st, err := c.Inspect(ctxT(t), k)
		return err == nil && st.Waiters == 1
	})
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if f.scripts.Load() == 0 {
		t.Fatal("no script went through the wrapper")
	}
}

// stringly wraps a client and forwards every script argument as the text
// fmt.Sprint makes of it, as an adapter or a record-and-replay layer may.
type stringly struct{ dlock.RedisClient }

func (s stringly) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return s.RedisClient.EvalSha(ctx, sha, keys, texts(args)...)
}

func (s stringly) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.RedisClient.Eval(ctx, script, keys, texts(args)...)
}

func texts(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = fmt.Sprint(a)
	}
	return out
}

// A wrapper sees the token as the string it is (found by review: sent as
// a pointer, which go-redis writes as the string, it reached a wrapper
// that formatted it as an address; the key held that, and Unlock left
// the lock held until its TTL).
func TestAWrapperSeesTheTokenAsAString(t *testing.T) {
	rdb := shared().Client(t)
	c := dlock.New(stringly{rdb})
	defer c.Close()
	k := key(t)
	for range 3 {
		l := mustLock(t, c, k)
		if v := rdb.Get(ctxT(t), k).Val(); v != l.Token() {
			t.Fatalf("the key holds %q, want the token", v)
		}
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatalf("Unlock: %v", err)
		}
		if n := rdb.Exists(ctxT(t), k).Val(); n != 0 {
			t.Fatal("the key is still held after Unlock")
		}
	}
}

func TestAnAutoPipelinerServesManyGoroutinesOnOneKey(t *testing.T) {
	ap, err := shared().Client(t).AutoPipeline()
	if err != nil {
		t.Fatalf("AutoPipeline: %v", err)
	}
	defer ap.Close()
	c := dlock.New(ap)
	defer c.Close()
	k := key(t)
	var (
		wg      sync.WaitGroup
		holders atomic.Int64
		errs    = make(chan error, 50)
	)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t), k, dlock.WithTTL(5*time.Second))
			if err != nil {
				errs <- err
				return
			}
			if holders.Add(1) != 1 {
				errs <- errors.New("two holders at once")
			}
			holders.Add(-1)
			errs <- l.Unlock(ctxT(t))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestNodeErrorsNameAClientWithoutAnAddressByItsPlace(t *testing.T) {
	f := &faulty{RedisClient: shared().Client(t)}
	f.fail.Store(1)
	c := dlock.New(f)
	defer c.Close()
	_, err := c.TryLock(ctxT(t), key(t))
	var ne *dlock.NodeError
	if !errors.As(err, &ne) || ne.Node != "node 0" {
		t.Fatalf("TryLock: %v, want a *NodeError for node 0", err)
	}
}

// byValue is a wrapper passed by value, with a field that makes it
// incomparable.
type byValue struct {
	dlock.RedisClient
	tags map[string]string
}

func TestClientsWrappedByValueAreTakenAsTheyAre(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	c := dlock.New(byValue{RedisClient: a.Client(t)}, byValue{RedisClient: b.Client(t)}, byValue{RedisClient: shared().Client(t)})
	defer c.Close()
	l := mustLock(t, c, key(t))
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

// Close waits for the requests whose callers stopped waiting (their
// contexts ended on a stalled server whose client never times out a read):
// once it returns, none of dlock's goroutines is left. (A review found
// this broken by an experiment of issue 59's sixth session, which did not
// land: Close returned at once and left them blocked until the server
// resumed.)
func TestCloseWaitsForRequestsTheirCallersLeft(t *testing.T) {
	s := redistest.Start(t)
	o := s.Options()
	o.ReadTimeout = -1
	rdb := redis.NewClient(o)
	defer rdb.Close()
	c := dlock.New(rdb)
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	time.Sleep(300 * time.Millisecond) // the first grant's eviction-policy check is done
	idle := goleak.IgnoreCurrent()
	s.Pause()
	t.Cleanup(s.Resume)
	for _, call := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := l.TTL(ctx); return err },
		func(ctx context.Context) error { return l.Extend(ctx, time.Minute) },
		func(ctx context.Context) error { _, err := c.Inspect(ctx, k); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		if err := call(ctx); err == nil {
			t.Error("a call to a paused server succeeded")
		}
		cancel()
	}
	time.AfterFunc(500*time.Millisecond, s.Resume)
	c.Close()
	if err := goleak.Find(idle); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}
