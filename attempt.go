package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
)

// An attempt is one try for a lock on every node at once (TryLock, and each
// try of a waiting Lock). Every node's answer is awaited, each until the
// node timeout or the caller's context ends; judge decides. What it may
// hold that the lock does not count on is given back: grants of a failed
// attempt before try returns, so a retry does not meet them; what a node's
// error may hide, in the background (releaseUncertain).
type attempt struct {
	c     *Client
	nm    *lockNames
	token string
	o     options
	sent  time.Time // when the request was sent: the lease counts from here (lease.go)

	listens bool // the caller will wait for release messages (try)

	// after: per node, the Client's releases of the key under way there,
	// which its acquire waits for (quorum.Flights); nil if none.
	after map[*node][]<-chan struct{}
}

// try makes one attempt; a taken lock is ErrNotObtained with the holder's
// TTL (< 0: unknown). listens: the caller will listen if it is taken.
func (c *Client) try(ctx context.Context, key string, o options, listens bool) (*Lock, time.Duration, error) {
	if err := ctx.Err(); err != nil { // nothing to ask for
		return nil, 0, notObtained(err)
	}
	token, err := tokens.New(o.kind, o.value, o.candidate)
	if err != nil {
		return nil, 0, err
	}
	a := &attempt{c: c, nm: c.names.get(key), token: token, o: o, listens: listens}
	if len(c.nodes) > 1 {
		a.after = releasesUnderWay(c.nodes, key)
	}
	a.sent = time.Now()
	var one [1]answer[grant] // room for one node's answer
	answers := round[grant, *attempt]{Timeout: o.nodeTimeoutFor(len(c.nodes)), By: a, Call: (*attempt).acquireOn}.Ask(one[:0], ctx, c.nodes)
	noteAnswers(o.note, answers)
	out := judge(answers, ctx.Err(), time.Since(a.sent), o.ttl)
	if out.err == nil {
		l := newLock(c, a.nm, token, out.fence, o, a.sent, o.ttl)
		for _, i := range out.uncertain {
			// A grant there would be one the lock does not count on: it
			// goes, raising the node's counter to the fence as a release
			// of the lock would (redlock.go).
			a.releaseUncertain(c.nodes[i], l.fence, answers[i].Err)
		}
		return l, 0, nil
	}
	return a.conclude(ctx, answers, out)
}

// conclude gives back what a failed attempt may hold (out: in time now,
// error-hidden in the background) and returns try's answer.
func (a *attempt) conclude(ctx context.Context, answers []answer[grant], out outcome) (*Lock, time.Duration, error) {
	c := a.c
	if !a.giveBack(ctx, c.nodesAt(out.giveBack)) && ctx.Err() != nil && !errors.Is(out.err, ctx.Err()) {
		// The caller stopped waiting for the give-back: a retry may meet
		// the grant for a moment, so the error says why.
		out.err = fmt.Errorf("%w (%w: the grant is given back in the background)", out.err, ctx.Err())
	}
	for _, i := range out.uncertain {
		a.releaseUncertain(c.nodes[i], 0, answers[i].Err)
	}
	return nil, out.holderTTL, out.err
}

// acquireOn runs the attempt's acquire on n once the Client's release of
// the key on n, if under way, has answered (quorum.Flights).
func (a *attempt) acquireOn(ctx context.Context, n *node) (grant, error) {
	if !quorum.AwaitAll(ctx, a.after[n], a.o.nodeTimeoutFor(len(a.c.nodes))) { // a Timeout: positive on several nodes
		return grant{}, n.fail("acquire", errUnsent)
	}
	return n.acquire(ctx, a.nm, a.token, a.o, a.listens)
}

// outcome is what an attempt's answers decide.
type outcome struct {
	err       error         // nil when the lock was obtained
	fence     int64         // obtained: the highest fence of the nodes that granted it
	holderTTL time.Duration // taken: the shortest TTL a holder reported, or -1
	giveBack  []int         // not obtained: the nodes that granted it, to release now
	uncertain []int         // the nodes whose error may hide a grant, to release in the background
}

// judge returns an attempt's outcome from its answers (in node order),
// ctx's error when read, the time since the send, and the TTL. The lock is
// obtained when a majority granted it in time: before the caller gave up,
// with TTL left beyond the drift margin (else the lease may be over, and
// the lock someone else's). Its fence is that majority's maximum: any later
// majority shares a node with it, all the fence argument needs
// (redlock.go). Whatever the verdict, a node whose error may hide a grant
// (a connection that failed after the script ran, a timeout; not one never
// sent) is given back in the background, as a node that just failed is
// not worth waiting for; if the lock was not obtained, so are the nodes
// that granted it, before try returns, so a retry does not meet them.
func judge(answers []answer[grant], ctxErr error, elapsed, ttl time.Duration) outcome {
	v := count(answers, grant.granted)
	vd := v.Of(len(answers))
	obtained := vd == quorum.Agreed && ctxErr == nil && elapsed < ttl-drift(ttl)
	out := outcome{holderTTL: -1}
	for i, a := range answers {
		switch {
		case a.Err == nil && a.V.ok, errors.Is(a.Err, ErrNoReplicaAck):
			// A grant too few replicas acknowledged is a grant all the
			// same: given back before the caller hears the refusal.
			out.giveBack = append(out.giveBack, i)
		case a.Err != nil && !neverSent(a.Err):
			out.uncertain = append(out.uncertain, i)
		}
	}
	switch {
	case obtained:
		return outcome{fence: grantedFence(answers), uncertain: out.uncertain}
	case ctxErr != nil:
		out.err = notObtained(ctxErr)
	case vd == quorum.Agreed: // too late to be of use
		out.err = notObtained(ErrLeaseExpired)
	case vd == quorum.Refused:
		out.err, out.holderTTL = ErrNotObtained, shortestHolder(answers)
		if v.Yes > 0 {
			out.err = errNotObtainedSplit
		}
	default:
		out.err = undecided(v, nil, len(answers))
	}
	return out
}

// grantedFence returns the highest fence among the grants.
func grantedFence(answers []answer[grant]) int64 {
	var fence int64
	for _, a := range answers {
		if a.Err == nil && a.V.ok {
			fence = max(fence, a.V.fence)
		}
	}
	return fence
}

// shortestHolder returns the shortest holder's TTL a node reported, or -1.
func shortestHolder(answers []answer[grant]) time.Duration {
	d := time.Duration(-1)
	for _, a := range answers {
		if a.Err == nil && !a.V.ok && a.V.pttl > 0 && (d < 0 || a.V.pttl < d) {
			d = a.V.pttl
		}
	}
	return d
}

// giveBack releases the token on nodes in parallel, in cleanups that run
// to their end, waits for them within the node timeout while ctx lasts,
// and reports whether all answered in time.
func (a *attempt) giveBack(ctx context.Context, nodes []*node) (done bool) {
	left := make(chan struct{}, len(nodes))
	for _, n := range nodes {
		a.c.cleanup(func(ctx context.Context) {
			a.release(ctx, n, 0)
			left <- struct{}{}
		})
	}
	if t := a.o.nodeTimeoutFor(len(a.c.nodes)); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	for range nodes {
		select {
		case <-left:
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// release gives the token back on n, raising its counter to fence if > 0.
func (a *attempt) release(ctx context.Context, n *node, fence int64) {
	if _, err := n.release(ctx, a.nm, a.token, fence, a.o.fenceKeep(), true); err != nil {
		a.warnLeft(n, err)
	}
}

// warnLeft logs that a give-back on n failed with err.
func (a *attempt) warnLeft(n *node, err error) {
	a.c.warn("dlock: could not give back a grant nobody waited for; it expires by its TTL",
		slog.String("key", a.nm.key), slog.String("node", n.Name), slog.Any("err", err))
}

// uncertainPause is how long releaseUncertain waits between its tries.
const uncertainPause = 100 * time.Millisecond

// releaseUncertain gives the token back on n, in the background, after
// cause, an error that may hide a grant (the request may have run or may
// still run), raising n's counter to fence as release does. A release sent
// while the request may be on its way can run first and find nothing (a
// stalled server runs both in either order once it resumes). So it first
// waits until go-redis is done with the request (settled), then releases
// until the server answers (releaseAnswered). Each wait is bounded by
// cleanupTimeout, and Close waits for both: a longer stall still leaves a
// late grant to its TTL. An acquire answered with a refusal holds nothing
// of ours: under overload most abandoned ones are, and releases add load.
func (a *attempt) releaseUncertain(n *node, fence int64, cause error) {
	a.c.spawn(func() {
		ctx, cancel := a.c.cleanupContext()
		answered := transport.Settled(ctx, cause)
		cancel()
		if answered && !tokens.Shared(a.token) && refusal(cause) {
			return
		}
		a.releaseAnswered(n, fence, answered)
	})
}

// refusal reports whether cause is an unanswered acquire (of a mutex) whose
// answer has since come and is an integer: the acquire script's answer when
// the key is taken (Redlock's acquire.lua), which grants nothing.
func refusal(cause error) bool {
	v, ok := transport.LateReply(cause)
	_, taken := v.(int64)
	return ok && taken
}

// releaseAnswered releases the token on n, every uncertainPause for at most
// cleanupTimeout, until the server answers. answered: the request being
// undone has had its answer, so one answer does. Otherwise a "not held" is
// checked again after uncertainPause: a server that answers has by then run
// what it held from before (it reads every socket in turn).
func (a *attempt) releaseAnswered(n *node, fence int64, answered bool) {
	ctx, cancel := a.c.cleanupContext()
	defer cancel()
	for {
		released, err := n.release(ctx, a.nm, a.token, fence, a.o.fenceKeep(), true)
		switch {
		case released || (err == nil && answered):
			return
		case err == nil:
			answered = true // the next answer is final
		case ctx.Err() != nil:
			if !answered {
				a.warnLeft(n, err)
			}
			return
		}
		pause(ctx, nil, uncertainPause)
	}
}
