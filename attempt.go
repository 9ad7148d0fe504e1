package dlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
)

// An attempt is one try for a lock on every node at once (TryLock, and each
// try of a waiting Lock). Its answers are awaited until a majority granted,
// all answered, or the node timeout passed; judge decides. What it may have
// left without getting the lock is given back before try returns, so a
// retry does not meet it; an answer after the decision goes to late.
type attempt struct {
	c     *Client
	nm    *lockNames
	token string
	o     options
	sent  time.Time // when the request was sent: the lease counts from here (lease.go)

	listens bool // the caller will wait for release messages (try)
	// caller is try's context: with WithReplicaAck, the acquire waits for
	// a connection only while it lasts (acquireOn).
	caller context.Context

	// after: per node, the Client's releases of the key under way there,
	// which its acquire waits for (quorum.Flights); nil if none.
	after map[*node][]<-chan struct{}

	held *Lock // the lock, if obtained: written before decided is unlocked
	// decided is locked by try's rounds until try returns, and late waits
	// for it. A mutex: it allocates nothing (docs/design.md,
	// "Measurements").
	decided sync.Mutex
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
	a := &attempt{c: c, nm: namesOf(key), token: token, o: o, listens: listens, caller: ctx}
	if len(c.nodes) > 1 {
		a.after = releasesUnderWay(c.nodes, key)
	}
	a.decided.Lock()
	defer a.decided.Unlock()
	a.sent = time.Now()
	answers := a.round().Ask(ctx, c.work, c.nodes)
	noteAnswers(o.note, answers)
	out := judge(answers, ctx.Err(), time.Since(a.sent), o.ttl)
	if out.err == nil {
		a.held = newLock(c, a.nm, token, out.fence, o, a.sent, o.ttl)
		var late []*node
		for i, an := range answers {
			if an.Abandoned {
				late = append(late, c.nodes[i])
			}
		}
		a.held.pending = quorum.NewPending(late)
		return a.held, 0, nil
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

// round is the attempt's question to the nodes: the acquire script, its
// late answers given back or joined to the lock (late).
func (a *attempt) round() round[grant] {
	r := round[grant]{
		Op: "acquire", Timeout: a.o.nodeTimeoutFor(len(a.c.nodes)),
		Call: a.acquireOn, Yes: grant.granted, Late: a.late,
	}
	if a.o.candidate {
		// A campaign hears every node out, so that its term is the highest
		// fence any node holding it remembers (Leader's term).
		r.Yes = nil
	}
	return r
}

// acquireOn runs the attempt's acquire on n once the Client's release of
// the key on n, if under way, has answered (quorum.Flights).
//
// With WithReplicaAck it is sent on the caller's context, not on ctx,
// which outlives the caller (internal/ask): the acquire and its WAIT take
// a connection of the user's pool of their own (no pipeliner's batch) and
// hold it until the replicas acknowledge, so callers who give up faster
// than the pool serves them would leave such acquires queued for it
// without bound. Each, sent after its caller had gone, granted a key
// nobody waited for, and the queue made the give-backs time out in the
// pool too, which left those keys held for their TTL. go-redis ends the
// wait for a connection when the context ends (a read only with
// ContextTimeoutEnabled); an acquire that may have been sent all the same
// is given back (late).
func (a *attempt) acquireOn(ctx context.Context, n *node) (grant, error) {
	if !quorum.AwaitAll(ctx, a.after[n], a.o.nodeTimeoutFor(len(a.c.nodes))) { // a Timeout: positive on several nodes
		return grant{}, n.fail("acquire", errUnsent)
	}
	if a.o.replicas > 0 {
		ctx = a.caller
	}
	return n.acquire(ctx, a.nm, a.token, a.o, a.listens)
}

// outcome is what an attempt's answers decide.
type outcome struct {
	err       error         // nil when the lock was obtained
	fence     int64         // obtained: the highest fence of the nodes that granted it
	holderTTL time.Duration // taken: the shortest TTL a holder reported, or -1
	giveBack  []int         // not obtained: the nodes that granted it, to release now
	uncertain []int         // not obtained: the nodes whose error may hide a grant, to release in the background
}

// judge returns an attempt's outcome from its answers (in node order),
// ctx's error when read, the time since the send, and the TTL. The lock is
// obtained when a majority granted it in time: before the caller gave up,
// with TTL left beyond the drift margin (else the lease may be over, and
// the lock someone else's). Its fence is that majority's maximum: any later
// majority shares a node with it, all the fence argument needs
// (redlock.go), so a late grant's fence is not needed. Otherwise every node
// that may hold the token is given back: those that granted before try
// returns, so a retry does not meet them; those whose error may hide a
// grant (a connection that failed after the script ran, a read timeout; not
// one never sent) in the background, as a node that just failed is not
// worth waiting for. Nodes yet to answer are late's.
func judge(answers []answer[grant], ctxErr error, elapsed, ttl time.Duration) outcome {
	v := count(answers, grant.granted)
	vd := v.Of(len(answers))
	if vd == quorum.Agreed && ctxErr == nil && elapsed < ttl-drift(ttl) {
		return outcome{fence: grantedFence(answers)}
	}
	out := outcome{holderTTL: -1}
	for i, a := range answers {
		switch {
		case a.Abandoned:
		case a.Err == nil && a.V.ok, errors.Is(a.Err, ErrNoReplicaAck):
			// A grant too few replicas acknowledged is a grant all the
			// same: given back before the caller hears the refusal.
			out.giveBack = append(out.giveBack, i)
		case a.Err != nil && !neverSent(a.Err):
			out.uncertain = append(out.uncertain, i)
		}
	}
	switch {
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

// late deals with an answer that came after the attempt was decided: a
// grant joins the lock, or is given back (lateGiveBack), raising the node's
// counter to an obtained lock's fence as its release would (redlock.go).
func (a *attempt) late(n *node, g grant, err error) {
	a.decided.Lock() // late runs in the request's goroutine; try is returning
	a.decided.Unlock()
	l := a.held
	if l != nil && l.pending.Arrived(n) && err == nil {
		return // Unlock releases n now that its answer has come (quorum.Pending)
	}
	if !lateGiveBack(g, err, l != nil && !l.asked() && !l.lease.over()) {
		return
	}
	var fence int64
	if l != nil {
		fence = l.fence
	}
	if err != nil {
		a.releaseUncertain(n, fence, err)
		return
	}
	a.c.spawn(func() { a.c.releaseAnswered(n, a.nm, a.token, fence, a.o.fenceKeep(), true) })
}

// lateGiveBack reports whether a late answer must be given back; joinable:
// the attempt obtained the lock, its lease is not over, and nothing has
// been asked of the nodes for it since (Lock.asked).
//
// Only a joinable lock takes a late grant: one whose lease is over was
// given up, and the grant would sit on its node for a TTL. Why joining is
// safe: late reads asked after the node's answer arrived, so the node had
// run the grant; renewals, Extend and Unlock mark the lock asked before
// they send. So one not yet marked reaches the node after the grant, and
// renews or releases it with the rest. One already marked may have reached
// the node first and found nothing: the grant must not outlive it (a
// release would leave the key for a TTL; so would an Extend that shortened
// it), so it is given back. A late error is given back too, unless it shows
// the request never left; a late "taken" holds nothing of ours.
func lateGiveBack(g grant, err error, joinable bool) bool {
	switch {
	case err != nil:
		return !neverSent(err)
	case !g.ok:
		return false
	}
	return !joinable
}

// giveBack releases the token on nodes in parallel, waiting within the node
// timeout while ctx lasts, and reports whether all answered in time.
func (a *attempt) giveBack(ctx context.Context, nodes []*node) (done bool) {
	if len(nodes) == 0 {
		return true
	}
	answers := round[struct{}]{Op: "release", Timeout: a.o.nodeTimeoutFor(len(a.c.nodes)),
		Call: a.giveBackOn,
	}.Ask(ctx, a.c.work, nodes)
	return !slices.ContainsFunc(answers, func(a answer[struct{}]) bool { return a.Abandoned })
}

// giveBackOn gives the attempt's token back on n (giveBack): one try while
// the caller may wait for it, then, if it failed, the rest in the
// background (releaseAnswered).
func (a *attempt) giveBackOn(ctx context.Context, n *node) (struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	if _, err := n.release(ctx, a.nm, a.token, 0, a.o.fenceKeep(), true); err != nil {
		a.c.spawn(func() { a.c.releaseAnswered(n, a.nm, a.token, 0, a.o.fenceKeep(), true) })
	}
	return struct{}{}, nil
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
		a.c.releaseAnswered(n, a.nm, a.token, fence, a.o.fenceKeep(), answered)
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

// releaseAnswered releases token on n (nm's key), raising n's counter to
// fence if > 0, kept for keep, every uncertainPause for at most
// cleanupTimeout, until the server answers: a give-back or release is not
// left for its TTL by a failure that a retry gets past (a pool timeout, a
// connection reset, a read timeout). Once Close has begun, a failed try is
// the last: Close does not wait for retries of a node that cannot be
// reached. answered: the request being undone has had its answer, so one
// answer does. Otherwise a "not held" is checked again after
// uncertainPause: a server that answers has by then run what it held from
// before (it reads every socket in turn). A release is token-checked: of
// two runs, the second finds nothing and changes nothing.
func (c *Client) releaseAnswered(n *node, nm *lockNames, token string, fence int64, keep time.Duration, answered bool) {
	ctx, cancel := c.cleanupContext()
	defer cancel()
	var last error // the last failure that was not the bound's
	for {
		released, err := n.release(ctx, nm, token, fence, keep, true)
		switch {
		case released || (err == nil && answered):
			return
		case err == nil:
			answered = true // the next answer is final
		case ctx.Err() == nil:
			last = err
		}
		if err != nil && (ctx.Err() != nil || c.ctx.Err() != nil) {
			c.warnLeft(n, nm, cmp.Or(last, err))
			return
		}
		pause(ctx, c.done, uncertainPause)
	}
}

// warnLeft logs that a release on n could not be made, after err.
func (c *Client) warnLeft(n *node, nm *lockNames, err error) {
	why := "no answer in time"
	if c.ctx.Err() != nil {
		why = "the Client was closed first"
	}
	c.warn("dlock: could not release a lock on a node ("+why+"); it expires there by its TTL",
		slog.String("key", nm.key), slog.String("node", n.Name), slog.Any("err", err))
}
