package transport

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
	"go.uber.org/goleak"
)

// Many goroutines on a default client: their scripts go in pipelines of
// the user's client (its pool and hooks: a pipeline hook sees them); the
// node's Close waits for the pipelines in flight and leaves the client to
// the user; a script after it goes straight to the user's client.
func TestManyGoroutinesCoalesceThroughTheUsersPool(t *testing.T) {
	s := redistest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rdb := s.Client(t)
	pipelined := &pipelineCounter{}
	rdb.AddHook(pipelined)
	n := NewNode(rdb, 0, time.Second)
	co := n.co
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	incr := NewScript("return redis.call('INCR', KEYS[1])")

	const goroutines, cycles = 64, 30
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range cycles {
				if err := n.Run(ctx, incr, []string{fmt.Sprintf("count:%d", g%16)}).Err(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for k := range 16 {
		v, _ := rdb.Get(ctx, fmt.Sprintf("count:%d", k)).Int()
		total += v
	}
	if total != goroutines*cycles {
		t.Fatalf("%d scripts ran, want %d", total, goroutines*cycles)
	}

	if pipelined.n.Load() == 0 {
		t.Fatal("64 goroutines never coalesced their scripts")
	}
	n.Close()
	if co.b.sending != 0 {
		t.Fatal("Close left pipelines in flight")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("the user's client after Close: %v", err)
	}
	if err := n.Run(viaPipeline{ctx}, incr, []string{"count:after-close"}).Err(); err != nil {
		t.Fatalf("a script after Close: %v", err)
	}
}

// Scripts left waiting in the pipeline while another caller loads their
// script, then a second flush: they load it once more, together, rather
// than each sending the whole script (EVAL) on the user's connections.
func TestScriptsSentBeforeALoadShareTheNextLoad(t *testing.T) {
	s := redistest.Start(t)
	rdb, admin := s.Client(t), s.Client(t)
	co := newCoalescer(rdb)
	t.Cleanup(co.close)
	bg := context.Background()
	script := NewScript("return redis.call('SET', KEYS[1], ARGV[1])")
	if err := co.run(viaPipeline{bg}, rdb, script, []string{"lock:reload"}, nil, "0").Err(); err != nil {
		t.Fatal(err) // the pipeliner is up
	}
	admin.ScriptFlush(bg)
	admin.ConfigResetStat(bg)
	if err := admin.Do(bg, "CLIENT", "PAUSE", "400", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	const callers = 64
	done := make(chan error, callers)
	for range callers {
		go func() { done <- co.run(viaPipeline{bg}, rdb, script, []string{"lock:reload"}, nil, "1").Err() }()
	}
	time.Sleep(50 * time.Millisecond) // they wait behind the pause
	if err := co.load(bg, rdb, script, co.loads.Load()); err != nil {
		t.Fatal(err) // another caller's load, through before they are answered
	}
	admin.ScriptFlush(bg) // and they meet this flush
	for range callers {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if evals := redistest.CommandCalls(admin, "eval"); evals > 0 {
		t.Errorf("%d EVALs: the scripts did not share a load", evals)
	}
}

// pipelineCounter is a go-redis hook that counts the commands it sees in
// pipelines.
type pipelineCounter struct{ n atomic.Int64 }

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
