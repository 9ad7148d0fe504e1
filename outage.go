package dlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/transport"
)

// Waiting through an outage
//
// A Lock (and Acquire, RLock, Campaign, LockAll, which wait through it)
// waits until it obtains the lock or its context ends. A node that cannot
// be reached for a while, the most common fault there is (a restart, a
// Sentinel or Cluster failover, a network cut), is one more reason to
// wait, not an answer: the waiter keeps its place in line (its id and its
// first join's score) and tries again with backoff. When the node is back,
// its join keeps the place the queue still has, or, if the queue was lost
// (a restart without persistence, a failover to a replica that had not
// caught up), takes it again at the old score, ahead of everyone who came
// later; a waiter is served once, since a grant is one key set to one
// token. Errors that no waiting can fix (NOPERM, WRONGTYPE, a script the
// server refuses, bad input) end the wait at once, as does any node error
// under WithFailFast.
//
// When the context ends during an outage, the error matches ErrNotObtained
// and the context's error, and carries the last *NodeError (errors.As):
// "busy" is a wait that ended without one, "Redis was down" one with it.

// transient reports whether err is a node's trouble that waiting can fix:
// the node could not be reached or did not answer (refused, reset, timed
// out, closed), or said it cannot serve yet (LOADING, READONLY after a
// demotion, MASTERDOWN, CLUSTERDOWN, TRYAGAIN, a slot moving, BUSY, a WAIT
// that the replicas did not acknowledge). A *QuorumError is transient when
// every node's error is.
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
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, transport.ErrNodeTimeout),
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

// outage paces a waiter's tries while its node cannot be reached, and
// remembers the last error for the one that ends the wait.
type outage struct {
	last  error
	delay time.Duration
}

// Backoff between tries during an outage: doubling from outageFirst to
// outageMost, each jittered down by up to half.
const (
	outageFirst = 50 * time.Millisecond
	outageMost  = time.Second
)

// rideOut reports whether a wait under o should go on after err, and if so
// waits before the next try: until the backoff passes, ctx ends, closed is
// closed, or wake says that something came for the waiter (a grant).
func (w *outage) rideOut(ctx context.Context, closed, wake <-chan struct{}, o options, err error) bool {
	if o.failFast || !transient(err) || ctx.Err() != nil {
		return false
	}
	w.last = err
	w.delay = min(max(2*w.delay, outageFirst), outageMost)
	t := time.NewTimer(w.delay/2 + rand.N(w.delay/2+1))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-closed:
	case <-wake:
	}
	return true
}

// still records err, the group's failing keepalive's, for a waiter that
// waited through it without riding it out (a node that does not answer is
// waited for in line): the wait's end then says what the node did.
func (w *outage) still(err error) {
	if err != nil && transient(err) {
		w.last = err
	}
}

// ended is the error of a wait that ended for cause (the context's error,
// or ErrClosed): it matches ErrNotObtained and cause, and carries the last
// node error of an outage the wait was riding out.
func (w *outage) ended(cause error) error {
	if w.last == nil {
		return notObtained(cause)
	}
	return fmt.Errorf("%w: %w (while the node could not be reached: %w)", ErrNotObtained, cause, w.last)
}

// isContended reports whether err means "someone else holds it" (and
// waiting may help), as opposed to an ended context or a failure.
func isContended(ctx context.Context, err error) bool {
	return errors.Is(err, ErrNotObtained) && ctx.Err() == nil
}

// mayWait reports whether Lock should wait and try again after err: someone
// else holds the lock, the node cannot be reached for now (transient; not
// with WithFailFast), or (Redlock) no majority answered but one still can.
// Nodes that were only slow (no answer within the node timeout) may answer
// next time, as may the nodes that said "taken"; nodes that failed outright
// (refused the connection, answered with an error) are counted as down, and
// once more than a minority is down no majority is possible: Lock then
// returns the *QuorumError at once (with WithFailFast, or when a node's
// error is not one that waiting can fix).
func (c *Client) mayWait(ctx context.Context, o options, err error) bool {
	if isContended(ctx, err) || !o.failFast && ctx.Err() == nil && transient(err) {
		return true
	}
	var qe *QuorumError
	if ctx.Err() != nil || !errors.As(err, &qe) {
		return false
	}
	var down transport.Votes // a node that failed outright is a no to "can a majority still answer?"
	for _, e := range qe.Errs {
		if !isSlow(e) {
			down.No++
		}
	}
	return down.Of(len(c.nodes)) != transport.Refused
}

// neverSent reports whether err shows that the command never reached the
// server (no connection could be had), so that it cannot have granted
// anything and there is nothing to give back. A connection whose setup the
// server refused (a wrong password, a database number it does not have)
// never sent the command either, and NOAUTH refuses a command unrun.
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

// isSlow reports whether a node's error only says that it did not answer
// in time: the node timeout, the go-redis client's own read timeout, or an
// acquire not sent because the node had not answered the Client's release
// of the key within the node timeout (errUnsent: whether a stalled node's
// error is that or the node timeout is a race between two timers).
func isSlow(err error) bool {
	var ne net.Error
	return errors.Is(err, transport.ErrNodeTimeout) || errors.Is(err, errUnsent) || errors.As(err, &ne) && ne.Timeout()
}
