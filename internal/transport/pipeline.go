package transport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// coalescer sends a node's scripts together when many goroutines of one
// Client run them at once: it counts the scripts in flight, and while more
// than coalesceAbove are (the new one included), it sends them in
// pipelines (batches, batch.go) instead of one request each. A lone
// script, the uncontended case, and the few at a time of a lock's
// hand-offs go straight to the user's client as before.
//
// The pipelines are the user's client's own (Pipelined): its pool, its
// dialer and its hooks serve them, so a user's tracing or metrics hook sees
// every script, pipelined ones through its ProcessPipelineHook. Nothing of
// the client's own changes (its AutoPipeline, if the user's code has one,
// is untouched). Only a plain *redis.Client coalesces (a Sentinel failover
// client is one); a cluster client or any other Client (Direct's wrapper
// included) is used as given.
//
// Why this is as safe as one request per script: every script is one
// EVALSHA either way, and a pipeline changes neither what the server runs
// nor its atomicity, only how the bytes travel. A request that go-redis
// sends again after its connection broke (it retries, here as on any
// client) may run twice: the acquire scripts answer a second run of the
// same token's request with the grant, not "taken", so nothing is left
// held unknown. A caller that stops
// waiting (its context ends, the node timeout) is treated as with a plain
// client: its request may still run, and the asker above (internal/ask) hands the answer
// to whoever must give a late grant back. No ordering between two
// goroutines' scripts is assumed anywhere (each waits for its own answer
// before sending the next), so the pipeliner's ordering does not matter.
type coalescer struct {
	user     *redis.Client // the client to pipeline through; nil: never coalesce
	bound    time.Duration // the longest a script waits in the pipeline (see send); 0: none
	inflight atomic.Int32
	shared   sharedBound // the bound of waits nothing else ends (bound.go)

	mu     sync.RWMutex // held for reading while a script uses the batches
	closed bool
	b      batches

	loadMu  sync.Mutex
	loading map[string]*loadCall // by script hash: the SCRIPT LOAD under way (see load)
	loaded  map[string]uint64    // by script hash: the value of loads its last load left
	loads   atomic.Uint64        // the count of loads through, of any script
}

// newCoalescer returns the coalescer of a node over rdb.
func newCoalescer(rdb Client) *coalescer {
	c := &coalescer{}
	if user, ok := rdb.(*redis.Client); ok {
		c.user, c.b.rdb = user, user
		c.b.ctx, c.b.stop = context.WithCancel(context.Background())
		// As long as the user's client would wait for a command: the
		// write and read timeouts, and a second for the queue. None when
		// the user's client has none (a negative timeout).
		if opt := user.Options(); opt.ReadTimeout >= 0 && opt.WriteTimeout >= 0 {
			c.bound = opt.WriteTimeout + opt.ReadTimeout + time.Second
		}
	}
	return c
}

// coalesceAbove is how many scripts of a node may be in flight at once,
// each on a connection of the user's pool, before the next goes through
// the pipeliner: the few that a lock's
// hand-off keeps in flight (the releaser's script, the next waiter's,
// a keepalive) go straight, each without waiting for a batch, and only
// the many of a busy Client (many goroutines over many keys, a herd
// joining) are batched (docs/design.md, "Measurements", has why 4).
const coalesceAbove = 4

// run runs script s on the node: through the pipeliner when more than
// coalesceAbove scripts are in flight (s included) or ctx asks for it
// (viaPipeline), else on the user's client, detached when ctx can end.
// Either way it returns by the time ctx ends.
func (c *coalescer) run(ctx context.Context, rdb Client, s *Script, keys []string, args ...any) *redis.Cmd {
	n := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	if _, forced := ctx.(viaPipeline); (forced || n > coalesceAbove) && c.user != nil {
		c.mu.RLock()
		if !c.closed {
			defer c.mu.RUnlock()
			return c.pipelined(ctx, rdb, s, keys, args)
		}
		c.mu.RUnlock()
	}
	if ctx.Done() != nil && c.detach() {
		return c.detached(ctx, rdb, s, keys, args) // it releases mu
	}
	// A copy: go-redis keeps what it is given.
	return s.Run(ctx, rdb, keys, slices.Clone(args)...)
}

// detach reports whether a request may run detached: not once close has
// begun. If so, the caller holds mu for reading, which the request's
// goroutine releases when go-redis returns.
func (c *coalescer) detach() bool {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		return false
	}
	return true
}

// detached runs s on the user's client in a goroutine of its own and waits
// for its answer while ctx lasts: go-redis ends the wait for a connection
// when ctx ends, but not a read, which only the client's read timeout
// ends (never, without one), so a caller waiting in it would return long
// after its context ended. The request itself gets ctx, so one still
// waiting for a connection when ctx ends is never sent. Unanswered in
// time, it is the caller's unanswered error (Settled, LateReply), as a
// pipelined one is. Its goroutine holds mu for reading (detach) until
// go-redis returns, so that close waits for it.
func (c *coalescer) detached(ctx context.Context, rdb Client, s *Script, keys []string, args []any) *redis.Cmd {
	args = slices.Clone(args) // go-redis keeps what it is given
	var cmd *redis.Cmd
	if err := c.await(ctx, func(r *reply) { cmd = s.Run(ctx, rdb, keys, args...); r.cmd = cmd }); err != nil {
		failed := redis.NewCmd(ctx, evalsha(s.hash, keys, args)...)
		failed.SetErr(err)
		return failed
	}
	return cmd
}

// await runs call, which sets the reply's cmd, in a goroutine of its own
// that releases mu (held for reading: detach) when call returns, and waits
// for it while ctx lasts: nil, or, when ctx ends first, the unanswered
// error that yields the reply later. Whatever else call sets is the
// caller's to read only after a nil.
func (c *coalescer) await(ctx context.Context, call func(r *reply)) error {
	done := make(chan struct{})
	r := &reply{done: done}
	go func() {
		defer c.mu.RUnlock()
		call(r)
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return &unanswered{context.Cause(ctx), r}
	}
}

// reply is a request's answer, cmd, once done is closed.
type reply struct {
	done <-chan struct{}
	cmd  *redis.Cmd
}

// evalsha returns the arguments of an EVALSHA of the script whose hash is
// sha on keys with args, each as it is (a slice is not flattened, as
// go-redis's Eval would).
func evalsha(sha any, keys []string, args []any) []any {
	cmdArgs := make([]any, 0, 3+len(keys)+len(args))
	cmdArgs = append(cmdArgs, "evalsha", sha, len(keys))
	for _, k := range keys {
		cmdArgs = append(cmdArgs, k)
	}
	return append(cmdArgs, args...)
}

// viaPipeline is a caller's context marked so that its script goes
// through the pipeliner whatever the number in flight (tests).
type viaPipeline struct{ context.Context }

// pipelined runs s in a batch. A script missing on the server is loaded
// (load, which skips the load when one finished since the script was
// sent) and sent again, twice at most; one missing even then (flushed
// again and again) is sent itself, as go-redis's Script.Run does. The
// second load is for a script that met a flush after the skipped load:
// without it, each of a herd's scripts left waiting behind a pause would
// send the whole script on a connection of the user's pool.
func (c *coalescer) pipelined(ctx context.Context, rdb Client, s *Script, keys []string, args []any) *redis.Cmd {
	for loads := 0; ; loads++ {
		since := c.loads.Load()
		cmd := c.send(ctx, s.hash, keys, args)
		if !noScript(cmd.Err()) {
			return cmd
		}
		if loads == 2 {
			return s.Eval(ctx, rdb, keys, slices.Clone(args)...)
		}
		if err := c.load(ctx, rdb, s, since); err != nil {
			cmd.SetErr(err)
			return cmd
		}
	}
}

// noScript reports whether err is the server's NOSCRIPT reply. A nil err,
// the usual case, is looked at first: redis.HasErrorPrefix's errors.As
// costs an allocation and a reflective walk even then.
func noScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// load loads s on the node for the pipelined scripts that found it
// missing (a fresh server, a restart, a failover, SCRIPT FLUSH): once for
// all those that find it missing at the same time. A batch of a herd's
// scripts all answer NOSCRIPT together, and a SCRIPT LOAD each would take
// every connection of the user's pool at once.
//
// Nor is it loaded again for a script sent before the last load of s was
// through (since, c.loads when it was sent, is below the count that load
// left): that script may have reached the server ahead of the load, and is
// simply sent again. Without this, each batch in flight during a load came
// back NOSCRIPT after it and loaded s once more.
func (c *coalescer) load(ctx context.Context, rdb Client, s *Script, since uint64) error {
	c.loadMu.Lock()
	if c.loaded[s.Hash()] > since {
		c.loadMu.Unlock()
		return nil
	}
	l, ok := c.loading[s.Hash()]
	if !ok {
		l = &loadCall{done: make(chan struct{})}
		if c.loading == nil {
			c.loading = map[string]*loadCall{}
		}
		c.loading[s.Hash()] = l
	}
	c.loadMu.Unlock()
	if ok {
		select {
		case <-l.done:
			return l.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Not ended by this caller's context: the others wait for it too. The
	// client's timeouts bound it.
	l.err = s.Load(context.WithoutCancel(ctx), rdb).Err()
	c.loadMu.Lock()
	delete(c.loading, s.Hash())
	if l.err == nil {
		if c.loaded == nil {
			c.loaded = map[string]uint64{}
		}
		c.loaded[s.Hash()] = c.loads.Add(1)
	}
	c.loadMu.Unlock()
	close(l.done)
	return l.err
}

// loadCall is a SCRIPT LOAD under way; err is set before done is closed.
type loadCall struct {
	done chan struct{}
	err  error
}

// send runs one EVALSHA (of the script whose hash is sha, on keys) through
// the pipeliner and waits for its answer until ctx ends or at most c.bound
// (a second more when the bound is shared, bound.go): the pipeliner does
// not end a
// command's wait when its context ends, nor, with many in flight on a
// stalled server, when the read timeout passes. A command not answered by
// then may still run (as one whose read timed out may): its caller treats
// it as unanswered, with ctx's error or a deadline error.
func (c *coalescer) send(ctx context.Context, sha any, keys []string, args []any) *redis.Cmd {
	cmdArgs := evalsha(sha, keys, args)
	cmd := redis.NewCmd(ctx, cmdArgs...)
	b := c.b.submit(cmd)
	wctx := ctx
	switch {
	case c.bound > 0 && ctx.Done() == nil:
		wctx = c.shared.get(c.bound)
	case c.bound > 0 && !EndsWithin(ctx, c.bound):
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, c.bound)
		defer cancel()
	}
	if err := b.wait(wctx, cmd); err != nil && wctx.Err() != nil {
		// Not answered in time. (Returning cmd itself would not do: its
		// Err waits for the pipeline, however long a stalled server
		// makes it.)
		failed := redis.NewCmd(ctx, cmdArgs...)
		why := context.Cause(ctx)
		if why == nil {
			why = fmt.Errorf("%w: no answer through the pipeline within %v", os.ErrDeadlineExceeded, c.bound)
		}
		failed.SetErr(&unanswered{why, &reply{b.done, cmd}})
		return failed
	}
	return cmd
}

// EndsWithin reports whether ctx has a deadline at most d from now.
func EndsWithin(ctx context.Context, d time.Duration) bool {
	end, ok := ctx.Deadline()
	return ok && time.Until(end) <= d
}

// unanswered is the error of a script whose answer did not come in time
// (err says why: the cause of the caller's context, or the pipeline's
// bound): a pipelined one, which the pipeliner may still send
// (go-redis retries a pipeline whose connection failed), or a detached
// one, still in go-redis. The server may run it; r tells when go-redis is
// done with it, and its answer (see Settled).
type unanswered struct {
	err error
	r   *reply
}

func (e *unanswered) Error() string { return e.err.Error() }
func (e *unanswered) Unwrap() error { return e.err }

// Settled waits, while ctx lasts, until the request that err was the
// answer to can no longer be sent: at once unless err is a script's
// unanswered, which go-redis may still send or retry. It reports
// whether the request's answer has come since: then it has run, and a
// request sent now reaches the server after it.
func Settled(ctx context.Context, err error) (answered bool) {
	var u *unanswered
	if !errors.As(err, &u) {
		return false
	}
	select {
	case <-u.r.done:
	case <-ctx.Done():
		return false
	}
	err = u.r.cmd.Err()
	return err == nil || IsRedisError(err) // a script's error reply is an answer too
}

// Pending reports whether err is the error of a request whose answer did
// not come in time (unanswered) and that go-redis may still send: one
// that Settled would wait for.
func Pending(err error) bool {
	var u *unanswered
	if !errors.As(err, &u) {
		return false
	}
	select {
	case <-u.r.done:
		return false
	default:
		return true
	}
}

// LateReply returns the reply that came, after its caller stopped waiting,
// to the script whose error err is (unanswered); for use once
// Settled has reported it answered. ok is false when err is not such an
// error, or the reply is an error. What the reply means is the caller's.
func LateReply(err error) (v any, ok bool) {
	var u *unanswered
	if !errors.As(err, &u) {
		return nil, false
	}
	select {
	case <-u.r.done:
	default:
		return nil, false // not answered yet
	}
	if u.r.cmd.Err() != nil {
		return nil, false
	}
	return u.r.cmd.Val(), true
}

// close stops pipelining and detaching: later scripts go to the user's
// client as requests of their own, inline. Holding mu, close knows that no
// caller waits on a batch any more (each holds mu for reading until its
// script is answered, or abandoned after c.bound, or a second more) and
// that no detached request is left in go-redis (its goroutine holds mu for
// reading until go-redis returns, which the user's client's timeouts
// bound): it ends the batches' context, so that a batch not yet sent is
// not (its scripts fail unanswered) and go-redis retries none in flight,
// and waits for those in flight, bounded likewise.
func (c *coalescer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.user != nil {
		c.b.stop()
		c.b.senders.Wait()
	}
}
