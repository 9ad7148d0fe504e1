package dlock

import (
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/internal/tokens"
)

const (
	// DefaultTTL is the TTL when WithTTL is not given (Redisson's
	// watchdog's): both how long a crashed holder blocks others and how
	// long a holder may work without renewing.
	DefaultTTL = 30 * time.Second

	// MinTTL is the shortest TTL accepted: below it, the round trip and the
	// drift margin would take up most of the lease.
	MinTTL = 10 * time.Millisecond

	// MaxTTL is the longest TTL accepted: a longer lease is a unit mistake;
	// renew a lock meant to be held that long.
	MaxTTL = 365 * 24 * time.Hour
)

// Option configures one acquisition (TryLock, Lock).
type Option func(*options)

// options holds one acquisition's settings (the With* options say each
// default), filled in by newOptions and nowhere else.
type options struct {
	// ttl is the lease, whole milliseconds, lowered to maxHold if longer.
	ttl time.Duration

	// autoRenew starts the watchdog (on in Do).
	autoRenew bool

	// maxHold is the hold's ceiling, from the acquire (if hasMaxHold).
	maxHold    time.Duration
	hasMaxHold bool

	// nodeTimeout bounds each node's answer (if hasNodeTimeout).
	nodeTimeout    time.Duration
	hasNodeTimeout bool

	// replicas must acknowledge a grant within replicaTimeout (if > 0).
	replicas       int
	replicaTimeout time.Duration

	// fenceMargin is how long the fencing counter outlives a grant's TTL.
	fenceMargin time.Duration

	// candidate marks a campaign, whose token carries value (election.go).
	candidate bool
	value     string

	// kind, when not "", is a shared hold's token prefix (semaphore.go).
	kind string

	// failFast ends a wait at the first node error (outage.go).
	failFast bool

	// owner, if set, is recorded beside each hold (owner.go).
	owner *Owner

	// note records which nodes answered, for the Event (trace.go).
	note *acquireNote
}

// primitive names what the acquisition is for, as Event.Primitive does.
func (o options) primitive() string {
	if o.candidate {
		return "election"
	}
	return tokens.Primitive(o.kind)
}

// fenceKeep is how long a grant keeps the lock's fencing counter: the TTL
// plus the fence margin.
func (o options) fenceKeep() time.Duration { return o.ttl + o.fenceMargin }

// WithTTL sets the lock's time to live (default DefaultTTL, from MinTTL to
// MaxTTL), truncated to milliseconds as Redis keeps it.
func WithTTL(d time.Duration) Option {
	return func(o *options) { o.ttl = d }
}

// WithAutoRenew keeps the lock alive while held: a watchdog goroutine of
// the Lock's renews it every TTL/3 (token-checked), retries a failed
// renewal while the lease lasts, and stops at Unlock, on loss, at the
// WithMaxHold ceiling, or at Close. Watch Lock.Context to learn of a loss.
func WithAutoRenew() Option {
	return func(o *options) { o.autoRenew = true }
}

// WithMaxHold sets a ceiling on how long the lock can be held, from the
// acquire request: no renewal or Extend passes it, and the Lock's Context
// ends there with cause ErrMaxHold, so a stuck holder cannot renew forever.
// A TTL longer than d is lowered to d. Default: none.
func WithMaxHold(d time.Duration) Option {
	return func(o *options) { o.maxHold, o.hasMaxHold = d, true }
}

// WithNodeTimeout bounds how long each node's answer is waited for, so a
// stalled node costs at most d, whatever the go-redis clients' timeouts; a
// lock a later answer granted is released. Default: DefaultNodeTimeout, at
// most a tenth of the TTL, with several nodes; none with one (the context
// bounds the call). It must be positive and below the TTL. On one node it
// bounds each of a waiting Lock's scripts too, which the wait then retries;
// a node not answered in time is a *NodeError ("no answer within the node
// timeout"), as with several.
func WithNodeTimeout(d time.Duration) Option {
	return func(o *options) { o.nodeTimeout, o.hasNodeTimeout = d, true }
}

// WithReplicaAck makes an acquisition wait until at least replicas replicas
// of the node have the grant, for at most timeout (Redis WAIT, in the
// acquire's round trip); without enough, the grant is given back and
// TryLock fails with an error matching ErrNoReplicaAck (Lock tries again
// until its context ends, as through any fault, unless WithFailFast: its
// error then matches both). It narrows the
// failover window of asynchronous replication but does not close it (a
// replica that acknowledged can still lose the write: fences remain the
// answer). A waiting Lock waits in the FIFO line as any: a hand-off is
// confirmed by the waiter's own acquire, whose WAIT covers the releaser's
// writes before it (replication is in order); a grant too few replicas
// acknowledged stays the waiter's while it retries.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(o *options) { o.replicas, o.replicaTimeout = replicas, timeout }
}

// WithFailFast makes Lock (and Acquire, RLock, Campaign, LockAll) return
// the first node error, a *NodeError (*QuorumError with several nodes),
// instead of waiting through an outage or failover until the context ends
// (outage.go). With several nodes, one that only answered late (its node
// timeout) is a vote lost, not an outage: Lock goes on while a majority
// can still answer. TryLock always fails fast.
func WithFailFast() Option {
	return func(o *options) { o.failFast = true }
}

// WithFenceMargin sets how long the fencing counter is kept past the
// grant's TTL (default DefaultFenceMargin, 0 to MaxFenceMargin): the
// largest step back of the server's clock fences ride out once the counter
// is gone (fence.go). A lock leaves nothing in Redis after TTL plus margin.
func WithFenceMargin(d time.Duration) Option {
	return func(o *options) { o.fenceMargin = d }
}

func newOptions(opts []Option) (options, error) {
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
	if o.owner != nil {
		if _, err := ownerRecord(*o.owner, "", time.Time{}); err != nil {
			return err
		}
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
