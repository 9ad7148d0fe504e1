package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wait"
)

// The fast scripts (internal/wait/fast.go): a lock or unlock of a mutex
// on one node whose key this Client has not seen contended lately is first
// tried with a lean script, of two or three keys and the uncontended case
// only; when it answers SLOW, the full script follows. They pay on the "64 keys, 64
// goroutines" row (docs/design.md, "The fast scripts").
var (
	lineFastAcquire = transport.NewScript(wait.FastAcquireScript)
	lineFastRelease = transport.NewScript(wait.FastReleaseScript)
)

// fast reports whether the fast scripts are worth trying on nm's key for
// token: a mutex's, with no replica acknowledgement asked, and no waiter
// of this Client's in the key's line now or lately (its wake subscription
// lingers: line_wakes.go). A wrong guess costs one script, never safety.
func (n *node) fast(nm *lockNames, token string, o options) bool {
	return n.single && o.replicas == 0 && !tokens.Shared(token) && n.wakes.quiet(nm.key)
}

// acquireFast runs the fast acquire for token: granted, or slow (the full
// acquire decides).
func (n *node) acquireFast(ctx context.Context, nm *lockNames, token string, o options) (g grant, slow bool, err error) {
	keep := max(o.fenceKeep(), lineClaim)
	res, err := n.Run(ctx, lineFastAcquire, nm.line[:3], token, o.ttl.Milliseconds(), keep.Milliseconds()).Result()
	if err != nil {
		return grant{}, false, n.fail("acquire", err)
	}
	r, err := wait.ParseReply(wait.RunFastAcquire, false, res)
	if err != nil {
		return grant{}, false, n.fail("acquire", err)
	}
	return grant{ok: r.Status == wait.Granted, fence: r.Fence}, r.Status == wait.Slow, nil
}

// releaseFast runs the fast release for token, and the full one (with
// keep) when it answers SLOW or fails: a fast release that failed may have
// done nothing, and a waiter in line would then wait out the key's TTL.
// Should the full one find the key gone, the fast one's error stands (it
// may have been the fast one that released it), marked errKeyGone: the
// lease is over either way.
func (n *node) releaseFast(ctx context.Context, nm *lockNames, token string, keep time.Duration) (bool, error) {
	res, err := n.Run(ctx, lineFastRelease, nm.fastRelease[:], token).Result()
	if err == nil {
		r, err := wait.ParseReply(wait.RunFastRelease, false, res)
		if err != nil {
			return false, n.fail("release", err)
		}
		if r.Status != wait.Slow {
			return r.Status == wait.Released, nil
		}
	}
	ok, full := n.releaseLine(ctx, nm, token, "", keep)
	switch {
	case err != nil && full == nil && !ok:
		return false, fmt.Errorf("%w (%w)", n.fail("release", err), errKeyGone)
	case err != nil && full != nil:
		return false, n.fail("release", err)
	}
	return ok, full
}

// errKeyGone marks a release's error when the key is known to no longer
// hold the token, though whether this release removed it is not:
// Lock.lateRelease ends the lease on it.
var errKeyGone = errors.New("the key no longer holds the token")

// lockFast carries out a Lock's first step when the Waiter's first command
// would be the fast acquire (wait.Config.Fast), before any Waiter or driver
// is made, sent at sent: the Lock, when the key is granted and its lease
// (from sent) has not ended, which is the Waiter's own Grant; else, with no
// Lock, the reply (or failure) as the Waiter's event, which waitInLine then
// feeds the Waiter after its Start. Uncontended, no waiter, driver or
// waiter name is made: it pays on the 64-keys row (docs/design.md, "The
// fast scripts").
func (c *Client) lockFast(ctx context.Context, nm *lockNames, token string, o options, sent time.Time) (*Lock, wait.Event) {
	sctx := ctx
	if o.hasNodeTimeout { // as the driver's exec bounds each script
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeoutCause(ctx, o.nodeTimeout, ask.ErrNodeTimeout)
		defer cancel()
	}
	g, slow, err := c.nodes[0].acquireFast(sctx, nm, token, o)
	switch {
	case slow:
		return nil, wait.Event{Kind: wait.Reply, Result: wait.Result{Status: wait.Slow}}
	case g.ok && time.Since(sent) < o.ttl-drift(o.ttl) && ctx.Err() == nil: // else the Waiter gives it back (replied1)
		noteStep(o.note, nil, false)
		return newLock(c, nm, token, g.fence, o, sent, o.ttl), wait.Event{}
	}
	return nil, replyEvent(g, err)
}

// quiet reports whether none of the Client's waiters is subscribed to
// key's wake channel, nor was within watchLinger.
func (ws *wakes) quiet(key string) bool {
	if ws.nkeys.Load() == 0 {
		return true
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return ws.keys[key] == nil
}
