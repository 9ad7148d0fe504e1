package transport

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// maxBatches is how many pipelines of a node's scripts are in flight at
// once, each on a connection of the user's pool (docs/design.md,
// "Measurements": the pipeliner's batches).
const maxBatches = 5

// batches sends the scripts given to it as pipelines of the user's client
// (Pipelined, so the client's pool and its ProcessPipelineHook serve them),
// at most maxBatches at once: a script that comes while they are all in
// flight waits in the open batch, which the first of them to finish sends
// next. Order between scripts does not matter (see coalescer).
type batches struct {
	rdb  *redis.Client
	ctx  context.Context    // the pipelines'; ended by stop
	stop context.CancelFunc // at Close: the batch not yet sent is not, and go-redis retries none

	mu      sync.Mutex
	open    *batch // the scripts waiting for a free sender
	sending int    // batches in flight
	senders sync.WaitGroup
}

// batch is scripts sent in one pipeline; done is closed once their
// answers (or errors) are in.
type batch struct {
	cmds []redis.Cmder // *redis.Cmd each
	done chan struct{}
}

// submit adds cmd to a batch, sent now if fewer than maxBatches are in
// flight, and returns that batch.
func (bs *batches) submit(cmd *redis.Cmd) *batch {
	bs.mu.Lock()
	if bs.open == nil {
		bs.open = &batch{done: make(chan struct{})}
	}
	b := bs.open
	b.cmds = append(b.cmds, cmd)
	if bs.sending < maxBatches {
		bs.sending++
		bs.open = nil
		bs.senders.Add(1)
		go bs.send(b)
	}
	bs.mu.Unlock()
	return b
}

// send sends b, then the batches that open meanwhile, until none is.
func (bs *batches) send(b *batch) {
	defer bs.senders.Done()
	for b != nil {
		// Its own context: the batch is many callers', each waiting with
		// its own (coalescer.send); the client's timeouts bound it, and
		// Close ends it.
		err := bs.ctx.Err()
		if err == nil {
			_, err = bs.rdb.Pipelined(bs.ctx, func(p redis.Pipeliner) error {
				for _, cmd := range b.cmds {
					_ = p.Process(bs.ctx, cmd)
				}
				return nil
			})
		}
		for _, cmd := range b.cmds {
			// Unsent (Close), or refused by a hook of the user's that did
			// not call next: go-redis set nothing on them.
			if err != nil && cmd.Err() == nil && cmd.(*redis.Cmd).Val() == nil {
				cmd.SetErr(err)
			}
		}
		close(b.done)
		bs.mu.Lock()
		b, bs.open = bs.open, nil
		if b == nil {
			bs.sending--
		}
		bs.mu.Unlock()
	}
}

// wait waits, while ctx lasts, for b's answers, and returns cmd's error
// (cmd is b's), or ctx's.
func (b *batch) wait(ctx context.Context, cmd *redis.Cmd) error {
	select {
	case <-b.done:
		return cmd.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}
