package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/redis/go-redis/v9"
)

// Waiting through an outage (docs/failures.md). A node that cannot be
// reached for a while (a restart, a failover, a network cut) is one more
// reason for a waiting Lock to wait: it keeps its id and token and tries
// again with backoff. Back within a second, its acquire keeps its place;
// later, or if the line was lost, it queues again; it is served once, since
// a grant is one key set to one token. Errors no waiting can fix end the wait
// at once, as does any node error under WithFailFast. A wait ended by its
// context carries the last *NodeError seen since the node last answered:
// "Redis was down", not "busy".

// transient reports whether err is a node's trouble that waiting can fix:
// no connection or no answer, or not serving yet (LOADING, READONLY after a
// demotion, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, a slot moving, BUSY, too few
// replicas). A *QuorumError is transient when every node's error is.
func transient(err error) bool {
	var qe *QuorumError
	if errors.As(err, &qe) {
		for _, e := range qe.Errs {
			if !transient(e) {
				return false
			}
		}
		return len(qe.Errs) > 0
	}
	var ne *NodeError
	if !errors.As(err, &ne) {
		return false
	}
	var nerr net.Error
	switch {
	case errors.As(err, &nerr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, ask.ErrNodeTimeout),
		errors.Is(err, errUnsent), errors.Is(err, ErrNoReplicaAck):
		return true
	}
	for _, prefix := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "BUSY", "NOREPLICAS"} {
		if redis.HasErrorPrefix(ne.Err, prefix) {
			return true
		}
	}
	return false
}

// outageErr is the error of a wait that ended for cause (the context's
// error, or ErrClosed): it matches ErrNotObtained and cause, and carries
// last, the node error of an outage the wait was riding out, if any.
func outageErr(cause, last error) error {
	if last == nil {
		return notObtained(cause)
	}
	return fmt.Errorf("%w: %w (while the node could not be reached: %w)", ErrNotObtained, cause, last)
}

// Backoff between tries during an outage: doubling from outageFirst to
// outageMost (the line's Waiter: internal/wait's Retry, RetryMax).
const (
	outageFirst = 50 * time.Millisecond
	outageMost  = time.Second
)

// isContended reports whether err means "someone else holds it" (and
// waiting may help), as opposed to an ended context or a failure.
func isContended(ctx context.Context, err error) bool {
	return errors.Is(err, ErrNotObtained) && ctx.Err() == nil
}

// unwaited is Lock's error for an attempt that failed with err and that it
// does not wait after: err, unless ctx ended meanwhile and err is one a
// wait outlasts (mayWait with a live context: contention, an unreachable
// node, a majority that may still answer). Then, as for a wait that ctx
// ended, it matches ErrNotObtained and ctx's error. A permanent error
// (NOPERM, WRONGTYPE on every node) is returned as it is.
func (c *Client) unwaited(ctx context.Context, o options, err error) error {
	cause := ctx.Err()
	switch {
	case cause == nil, errors.Is(err, ErrNotObtained) && errors.Is(err, cause):
		return err
	case c.mayWait(context.WithoutCancel(ctx), o, err): // contention included
		return gaveUp(cause, err)
	}
	return err
}

// mayWait reports whether Lock should wait and try again after err: the
// lock is taken, the node cannot be reached for now (transient; not with
// WithFailFast), or (Redlock) a majority can still answer: nodes that
// failed outright, not merely slow, count as down, and once more than a
// minority is down, or with WithFailFast one, Lock returns the
// *QuorumError at once.
func (c *Client) mayWait(ctx context.Context, o options, err error) bool {
	if isContended(ctx, err) || !o.failFast && ctx.Err() == nil && transient(err) {
		return true
	}
	var qe *QuorumError
	if ctx.Err() != nil || !errors.As(err, &qe) {
		return false
	}
	var down quorum.Votes // a node that failed outright is a no to "can a majority still answer?"
	for _, e := range qe.Errs {
		if !isSlow(e) {
			down.No++
		}
	}
	return down.Of(len(c.nodes)) != quorum.Refused && !(o.failFast && down.No > 0)
}

// neverSent reports whether err shows that the command never reached the
// server (no connection; a setup the server refused, such as a wrong
// password or database; NOAUTH): it granted nothing to give back.
func neverSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, errUnsent) ||
		redis.HasErrorPrefix(err, "WRONGPASS") ||
		redis.HasErrorPrefix(err, "NOAUTH") ||
		redis.HasErrorPrefix(err, "DB index is out of range")
}

// isSlow reports whether a node's error only says it did not answer in
// time: the node timeout, go-redis's read timeout, or errUnsent (which of
// the two a stalled node gets is a race between timers).
func isSlow(err error) bool {
	var ne net.Error
	return errors.Is(err, ask.ErrNodeTimeout) || errors.Is(err, errUnsent) || errors.As(err, &ne) && ne.Timeout()
}
