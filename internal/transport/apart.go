package transport

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// aparts runs requests that are waited for until their callers' contexts
// end (run), and counts their goroutines, which the node's Close waits for.
type aparts struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// run runs send in a goroutine of its own and waits for it until ctx ends:
// go-redis ends a request neither when its context is cancelled nor, by
// default, at its deadline. send leaves its answer in f.cmd. A request not
// answered by then may still run: run's error is then unanswered (Settled,
// LateReply), with ctx's cause. The goroutine ends with the request, which
// the client's timeouts bound. A ctx that cannot end is spared the
// goroutine.
func (a *aparts) run(ctx context.Context, send func(f *flight)) (*flight, error) {
	if ctx.Done() == nil {
		f := &flight{}
		send(f)
		return f, nil
	}
	done := make(chan struct{})
	f := &flight{done: done}
	a.mu.Lock()
	tracked := !a.closed // a request after close is not waited for
	if tracked {
		a.wg.Add(1)
	}
	a.mu.Unlock()
	go func() {
		if tracked {
			defer a.wg.Done()
		}
		defer close(done)
		send(f)
	}()
	select {
	case <-done:
		return f, nil
	case <-ctx.Done():
		return nil, &unanswered{context.Cause(ctx), f}
	}
}

// close waits for the requests under way.
func (a *aparts) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}

// apart runs s as a request of its own (direct), waited for until ctx
// ends (see aparts.run).
func (c *coalescer) apart(ctx context.Context, rdb Client, s *Script, keys []string, boxed []any, args []any) *redis.Cmd {
	args = slices.Clone(args) // the caller's may be on its stack
	f, err := c.aparts.run(ctx, func(f *flight) { f.cmd = c.direct(ctx, rdb, s, keys, boxed, args) })
	if err != nil {
		failed := redis.NewCmd(ctx)
		failed.SetErr(err)
		return failed
	}
	return f.cmd
}

// RunAcked runs s and WAIT in one round trip (WithReplicaAck): s's reply,
// and how many of replicas acknowledged its writes within timeout. It
// waits until ctx ends (see aparts.run).
func (n *Node) RunAcked(ctx context.Context, s *Script, keys []string, replicas int, timeout time.Duration, args ...any) (any, int, error) {
	var acked int
	var err error
	f, unanswered := n.co.aparts.run(ctx, func(f *flight) { f.cmd, acked, err = n.runAcked(ctx, s, keys, replicas, timeout, args) })
	switch {
	case unanswered != nil:
		return nil, 0, unanswered
	case f.cmd.Err() != nil:
		return nil, 0, f.cmd.Err()
	}
	return f.cmd.Val(), acked, err
}

// runAcked is RunAcked's round trip: s's command (its error, or a failed
// load's), and WAIT's answer.
func (n *Node) runAcked(ctx context.Context, s *Script, keys []string, replicas int, timeout time.Duration, args []any) (*redis.Cmd, int, error) {
	for loaded := false; ; loaded = true {
		var script, wait *redis.Cmd
		_, err := n.RDB.Pipelined(ctx, func(p redis.Pipeliner) error {
			script = s.EvalSha(ctx, p, keys, args...)
			wait = p.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
			return nil
		})
		if err != nil && noScript(script.Err()) && !loaded {
			if err := s.Load(ctx, n.RDB).Err(); err != nil {
				script.SetErr(err)
				return script, 0, nil
			}
			continue
		}
		if script.Err() != nil {
			return script, 0, nil
		}
		acked, err := wait.Int64()
		return script, int(acked), err
	}
}

// Send sends cmds to the node in one pipeline (a MULTI/EXEC transaction
// if tx), and waits for their answers until ctx ends (see aparts.run), when it
// returns ctx's cause. On an error, the cmds may still be written: read
// none of them then.
func (n *Node) Send(ctx context.Context, tx bool, cmds ...redis.Cmder) error {
	pipe := n.RDB.Pipelined
	if tx {
		pipe = n.RDB.TxPipelined
	}
	var err error
	_, unanswered := n.co.aparts.run(ctx, func(*flight) {
		_, err = pipe(ctx, func(p redis.Pipeliner) error {
			for _, c := range cmds {
				_ = p.Process(ctx, c)
			}
			return nil
		})
	})
	if unanswered != nil {
		return context.Cause(ctx)
	}
	return err
}

// Do sends one command to the node and waits for its answer until ctx
// ends (Send); then the command's error is ctx's cause.
func (n *Node) Do(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if err := n.Send(ctx, false, cmd); err != nil && ctx.Err() != nil {
		failed := redis.NewCmd(ctx, args...)
		failed.SetErr(err)
		return failed
	}
	return cmd
}
