package dlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/dlock-go/dlock/internal/gate"
)

// The listening wait: Lock with Redlock, which does not queue (each node
// would order its waiters on its own). A Client's waiters
// on a key take turns at its gate (internal/gate); the one whose turn it is
// tries whenever a majority of nodes announce a release, or a timer fires.

// notifyWindow is how long a listening waiter's failed attempt keeps the
// notify key alive; the release publishes only while it exists, so a
// release nobody listens for costs no PUBLISH. A waiter retries at least
// every maxRetryWait, renewing it; if it lapses, the timer still retries.
const notifyWindow = 3 * maxRetryWait

// notifyMillis is notifyWindow as the acquire script takes it (boxed once).
var notifyMillis any = notifyWindow.Milliseconds()

// A listening wait is woken by release messages, backed by a jittered timer
// (for expiries and lost messages) doubling from minRetryWait to
// maxRetryWait, or firing just after the holder's TTL when sooner.
const (
	minRetryWait = 16 * time.Millisecond
	maxRetryWait = time.Second
)

// waitListening is Lock's wait with Redlock, after a
// first attempt that failed with err, or none (err nil:
// gate.Gates.First): at its gate's turn, it waits for a release
// message or a jittered timer, and tries again.
func (c *Client) waitListening(ctx context.Context, key string, o options, err error, contended *bool) (*Lock, error) {
	last := err // the last attempt's error
	slow := slowNodes{c: c, key: key}
	slow.note(err)
	turn, ok := c.gates.Enter(ctx, c.done, key)
	if !ok {
		return nil, gaveUp(c.stopped(ctx), last)
	}
	var held time.Time // the lease's end, once this turn obtained the lock
	defer func() { turn.Leave(held) }()

	// The gate subscribed before this turn's next attempt, so a release
	// between that attempt and the wait below is not missed.
	wait := minRetryWait
	turn.Subscribed(ctx, wait)
	turn.AwaitHolder(ctx, c.done)
	if err := c.stopped(ctx); err != nil {
		return nil, gaveUp(err, last)
	}
	for {
		turn.Attempting()
		l, pttl, err := c.try(ctx, key, o, true)
		switch {
		case err == nil:
			held = l.lease.validUntil()
			return l, nil
		case ctx.Err() != nil:
			return nil, gaveUp(ctx.Err(), last)
		case !c.mayWait(ctx, o, err):
			return nil, c.unwaited(ctx, o, err)
		}
		*contended = *contended || isContended(ctx, err)
		slow.note(err)
		last = err
		var stop error
		if wait, stop = c.awaitRetry(ctx, turn, err, wait, pttl); stop != nil {
			return nil, gaveUp(stop, last)
		}
	}
}

// awaitRetry waits, in turn, for a release message or the retry timer
// (wait, pttl) after an attempt that failed with err. It returns the next
// wait, doubled to maxRetryWait when the timer ran out, and why to stop:
// ctx's end, or ErrClosed.
func (c *Client) awaitRetry(ctx context.Context, turn *gate.Turn, err error, wait, pttl time.Duration) (time.Duration, error) {
	switch released := turn.Await(ctx, c.done, retryDelay(wait, pttl)); {
	case !released:
		wait = min(2*wait, maxRetryWait)
	case errors.Is(err, errSplit):
		// Another Client's waiter split the nodes with us: a random pause
		// keeps us from splitting them again.
		pause(ctx, c.done, rand.N(minRetryWait))
	}
	return wait, c.stopped(ctx)
}

// slowNodes warns, once per Lock call, that it waits for a majority of
// nodes to answer: a Lock without a deadline would otherwise wait silently.
type slowNodes struct {
	c      *Client
	key    string
	warned bool
}

func (s *slowNodes) note(err error) {
	if !s.warned && errors.Is(err, ErrNoQuorum) {
		s.warned = true
		s.c.warn("dlock: Lock is waiting for a majority of nodes to answer",
			slog.String("key", s.key), slog.Any("err", err))
	}
}

// errSplit marks a Redlock attempt that some nodes granted while a
// majority was taken: another waiter tried at the same moment.
var (
	errSplit            = errors.New("the nodes were split between waiters")
	errNotObtainedSplit = fmt.Errorf("%w (%w)", ErrNotObtained, errSplit)
)

// gaveUp is Lock's error when it stops waiting for cause (an ended context,
// ErrClosed): it matches ErrNotObtained and cause, and, when the last
// attempt failed for want of a majority or a reachable node, rather than
// contention, that attempt's *QuorumError or *NodeError too.
func gaveUp(cause, last error) error {
	if errors.Is(last, ErrNoQuorum) || transient(last) {
		return fmt.Errorf("%w: %w (last attempt: %w)", ErrNotObtained, cause, last)
	}
	return notObtained(cause)
}

// retryDelay returns a jittered wait in [wait/2, wait), or just past the
// holder's TTL if sooner (a lock that expires publishes nothing).
func retryDelay(wait, holderTTL time.Duration) time.Duration {
	if holderTTL > 0 && holderTTL < wait/2 {
		return holderTTL + rand.N(wait/8+1)
	}
	return wait/2 + rand.N(wait/2+1)
}
