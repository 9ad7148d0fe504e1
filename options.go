package dlock

import (
	"errors"
	"fmt"
	"time"
)

const (
	// DefaultTTL is the lock's time to live when WithTTL is not given: the
	// same 30 s that Redisson's watchdog uses. It is both how long a crashed
	// holder blocks others and how long a holder may work without renewing.
	DefaultTTL = 30 * time.Second

	// MinTTL is the shortest TTL accepted. Below it, the round trip and the
	// clock-drift margin take up most of the lease, and the lock would be
	// lost before the holder could do anything with it.
	MinTTL = 10 * time.Millisecond

	// MaxTTL is the longest TTL accepted. A lease of more than a year is
	// a unit mistake, not a plan; a lock meant to be held that long should
	// be renewed.
	MaxTTL = 365 * 24 * time.Hour
)

// Option configures one acquisition (TryLock, Lock).
type Option func(*options)

// options holds one acquisition's settings. Defaults are filled in by
// newOptions and nowhere else.
type options struct {
	// ttl is the lease: the key expires this long after it is set or
	// extended unless it is released first. Default DefaultTTL; at least
	// MinTTL, at most MaxTTL; whole milliseconds (anything finer is truncated).
	// Lowered to maxHold when that is shorter.
	ttl time.Duration

	// autoRenew starts a watchdog that renews the lease every ttl/3 until
	// Unlock. Default off (on in Do).
	autoRenew bool

	// maxHold is the ceiling on the total hold time, counted from the
	// acquire request: no renewal or Extend reaches past it. Default: none
	// (hasMaxHold false). At least MinTTL.
	maxHold    time.Duration
	hasMaxHold bool

	// nodeTimeout bounds each node's answer. Default (hasNodeTimeout
	// false): DefaultNodeTimeout, at most ttl/10, with several nodes; none
	// with one node. Positive and below the TTL.
	nodeTimeout    time.Duration
	hasNodeTimeout bool

	// replicas, when positive, is how many replicas must acknowledge a
	// grant (WAIT) within replicaTimeout, or the grant is given back.
	// Default 0: no acknowledgement asked for.
	replicas       int
	replicaTimeout time.Duration

	// fenceMargin is how long the fencing counter outlives the TTL of
	// the grant that wrote it (fence.go). Default DefaultFenceMargin;
	// from 0 to MaxFenceMargin.
	fenceMargin time.Duration

	// candidate marks an election's campaign, whose token carries value
	// (election.go).
	candidate bool
	value     string

	// kind, when not "", makes the grant a semaphore permit or a
	// read-write hold: the prefix its token starts with (semaphore.go).
	kind string

	// failFast ends a wait at the first node error instead of riding out
	// an outage (outage.go). Default off.
	failFast bool

	// note, when not nil, records which nodes answered the attempts, for
	// the acquisition's Event (trace.go).
	note *acquireNote
}

// primitive names what the acquisition is for, as Event.Primitive does.
func (o options) primitive() string {
	if o.candidate {
		return "election"
	}
	return primitiveOf(o.kind)
}

// primitiveFor is o.primitive() for what h reports, or "" when h reports
// nothing (no observer or tracer): naming it is work the uncontended path
// is spared.
func (o *options) primitiveFor(h *hooks) string {
	if h == nil {
		return ""
	}
	return o.primitive()
}

// fenceKeep is how long a grant keeps the lock's fencing counter: the TTL
// plus the fence margin.
func (o options) fenceKeep() time.Duration { return o.ttl + o.fenceMargin }

// WithTTL sets the lock's time to live (default DefaultTTL, from MinTTL to
// MaxTTL).
// Redis keeps milliseconds, so finer precision is truncated.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.ttl = d }
}

// WithAutoRenew keeps the lock alive while it is held: a watchdog goroutine,
// owned by the Lock, renews the lease every TTL/3 with the token-checked
// extend, retries a failed renewal while the lease lasts, and stops at
// Unlock, when the lock is lost, at the WithMaxHold ceiling, or when the
// Client is closed. Watch Lock.Context to learn when the lock is gone.
func WithAutoRenew() Option {
	return func(o *options) { o.autoRenew = true }
}

// WithMaxHold sets a ceiling on how long the lock can be held, counted from
// the acquire request: renewals (automatic or by Extend) never extend the
// lease past it, and the Lock's Context ends there with cause ErrMaxHold. It
// keeps a stuck holder from renewing forever. A TTL longer than d is lowered
// to d. Default: no ceiling.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) { o.maxHold, o.hasMaxHold = d, true }
}

// WithNodeTimeout bounds how long each node's answer is waited for, so that
// a stalled node costs at most d, whatever timeouts the go-redis clients
// have. A node that answers later is cleaned up after (a lock it granted is
// released). Default with several nodes (Redlock): DefaultNodeTimeout, but
// at most a tenth of the TTL; with one node: none (the context bounds the
// call). It must be positive and below the TTL.
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) { o.nodeTimeout, o.hasNodeTimeout = d, true }
}

// WithReplicaAck makes an acquisition wait until at least replicas replicas
// of the node have the grant, for at most timeout (Redis WAIT, sent in the
// same round trip as the acquire). Without enough acknowledgements the grant
// is given back and the call fails with an error matching ErrNoReplicaAck.
// It narrows the failover window of asynchronous replication (a master that
// dies after the acknowledgement has passed the lock on) but does not close
// it: WAIT does not make Redis strongly consistent, and a replica that
// acknowledged can still lose the write (fences remain the answer). With
// it, waiting is by notification and retry, not in the FIFO queue: a
// hand-off is written by the releaser, whose WAIT would not cover it.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.replicaTimeout = replicas, timeout }
}

// WithFailFast makes Lock (and Acquire, RLock, Campaign, LockAll) return
// the first node error instead of waiting through it: a node that cannot
// be reached, or a failover under way, ends the wait at once with a
// *NodeError (a *QuorumError with several nodes) rather than when the
// context ends (outage.go). TryLock always fails fast.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}

// WithFenceMargin sets how long the lock's fencing counter is kept past
// the grant's TTL (default DefaultFenceMargin, from 0 to MaxFenceMargin):
// the largest step back of the Redis server's clock that fences ride out
// once the counter is gone (fence.go). A released or expired lock leaves
// nothing in Redis after its TTL plus this margin.
func WithFenceMargin(d time.Duration) Option {
	return func(o *options) { o.fenceMargin = d }
}

func newOptions(opts []Option) (options, error) {
	if len(opts) == 0 { // the defaults, without the allocation that opt(&o) costs o
		o := defaultOptions()
		return o, o.check()
	}
	o := defaultOptions()
	for i, opt := range opts {
		if opt == nil {
			return o, invalid("option %d is nil", i)
		}
		opt(&o)
	}
	err := o.check()
	return o, err
}

// defaultOptions returns the options of a call given none.
func defaultOptions() options {
	return options{ttl: DefaultTTL, fenceMargin: DefaultFenceMargin}
}

// check validates o, lowering the TTL to the hold ceiling first.
func (o *options) check() error {
	if o.hasMaxHold {
		if o.maxHold < MinTTL {
			return invalid("max hold %v is below the minimum TTL %v", o.maxHold, MinTTL)
		}
		if o.ttl > o.maxHold {
			o.ttl = o.maxHold
		}
	}
	if err := checkTTL(o.ttl); err != nil {
		return err
	}
	o.ttl = o.ttl.Truncate(time.Millisecond)
	if o.replicas < 0 || (o.replicas > 0 && (o.replicaTimeout <= 0 || o.replicaTimeout >= o.ttl)) {
		return invalid("replica acknowledgement of %d within %v: want replicas >= 0 and a timeout that is positive and below the TTL %v", o.replicas, o.replicaTimeout, o.ttl)
	}
	if o.hasNodeTimeout && (o.nodeTimeout <= 0 || o.nodeTimeout >= o.ttl) {
		return invalid("node timeout %v must be positive and below the TTL %v", o.nodeTimeout, o.ttl)
	}
	if o.kind != "" && o.replicas > 0 {
		return fmt.Errorf("dlock: WithReplicaAck with a semaphore or read-write lock: %w", errors.ErrUnsupported)
	}
	if o.fenceMargin < 0 || o.fenceMargin > MaxFenceMargin {
		return invalid("fence margin %v: want 0 to %v", o.fenceMargin, MaxFenceMargin)
	}
	return nil
}

func checkTTL(d time.Duration) error {
	if d < MinTTL {
		return invalid("TTL %v is below the minimum %v", d, MinTTL)
	}
	if d > MaxTTL {
		return invalid("TTL %v is above the maximum %v", d, MaxTTL)
	}
	return nil
}
