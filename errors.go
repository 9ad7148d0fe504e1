package dlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/internal/argerr"
)

// Errors returned by dlock. Test for them with errors.Is: returned errors
// wrap or join them with their causes (a Lock that gave up because its
// context ended matches both ErrNotObtained and ctx.Err()).
var (
	// ErrNotObtained means the lock was not obtained: someone else holds it,
	// or the caller's context ended before it could be obtained. It is never
	// returned for a Redis failure alone; those come back as a *NodeError.
	ErrNotObtained = errors.New("dlock: not obtained")

	// ErrNotHeld means the key no longer held this lock's token (released,
	// or expired and perhaps someone else's now). Nothing was changed.
	ErrNotHeld = errors.New("dlock: not held")

	// ErrInvalidArgument means a call was given bad input: an empty key, a
	// TTL below MinTTL, and the like. Nothing was sent to Redis.
	ErrInvalidArgument = argerr.Err

	// ErrNoQuorum means a Redlock operation got no majority of nodes to
	// answer: a *QuorumError lists each node's error. Never for contention
	// or loss alone; a Lock whose last attempt lacked one matches it too.
	ErrNoQuorum = errors.New("dlock: no quorum")

	// ErrNoReplicaAck means a grant was not acknowledged by as many replicas
	// as WithReplicaAck asked for in time; it was given back.
	ErrNoReplicaAck = errors.New("dlock: grant not acknowledged by enough replicas")

	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("dlock: client closed")

	// ErrLost is matched by a Lock's Context's cause when the lock is or
	// may be lost: ErrKeyLost, ErrLeaseExpired, ErrMaxHold, ErrRevoked. Do's error
	// matches it when the lock was lost while fn ran.
	ErrLost = errors.New("dlock: lock lost")

	// ErrKeyLost is the cause of a Lock's Context when a renewal, Extend,
	// TTL or Unlock found the key no longer holding the token: deleted,
	// overwritten, or lost with a restart without persistence or a failover
	// to a replica that never had it. It matches ErrLost.
	ErrKeyLost = fmt.Errorf("%w: the key no longer holds this lock's token", ErrLost)

	// ErrLeaseExpired is the cause of a Lock's Context when the local
	// estimate of the lease ran out before a renewal confirmed it: Redis may
	// already have let someone else in. It matches ErrLost.
	ErrLeaseExpired = fmt.Errorf("%w: lease expired without renewal", ErrLost)

	// ErrMaxHold is the cause of a Lock's Context when the lock reached the
	// hold ceiling set with WithMaxHold. It matches ErrLost.
	ErrMaxHold = fmt.Errorf("%w: maximum hold time reached", ErrLost)

	// ErrRevoked is the cause of a Lock's Context when a renewal found its
	// hold revoked (Client.Revoke), followed by who revoked it and why. It
	// matches ErrLost.
	ErrRevoked = fmt.Errorf("%w: revoked", ErrLost)

	// ErrReleased is the cause of a Lock's Context after Unlock released
	// the lock. It does not match ErrLost.
	ErrReleased = errors.New("dlock: released")
)

// NodeError is a failure talking to one Redis node: a connection error, a
// timeout, or an error reply such as READONLY, NOPERM or OOM. Err is the
// go-redis error and can be inspected with errors.Is / errors.As as usual.
type NodeError struct {
	Node string // the node's address, without credentials
	Op   string // what dlock was doing: "acquire", "release", "extend", "ttl", "subscribe"
	Err  error  // the go-redis error, or that no answer came within the node timeout
}

// Error names the node, the operation and the cause.
func (e *NodeError) Error() string {
	return fmt.Sprintf("dlock: %s on %s: %v", e.Op, e.Node, e.Err)
}

// Unwrap returns the underlying error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError is a Redlock operation's failure to reach a majority of nodes.
// It matches ErrNoQuorum and, through errors.As, each node's *NodeError.
type QuorumError struct {
	OK     int     // nodes that said yes
	Nodes  int     // nodes in the Client
	Quorum int     // nodes needed
	Errs   []error // the failed nodes' errors, each naming its node
}

// Error says how many nodes agreed, how many were needed, and why the
// others failed.
func (e *QuorumError) Error() string {
	msg := fmt.Sprintf("%v: %d of %d nodes agreed, %d needed", ErrNoQuorum, e.OK, e.Nodes, e.Quorum)
	for _, err := range e.Errs {
		msg += "; " + err.Error()
	}
	return msg
}

// Unwrap returns ErrNoQuorum and the nodes' errors.
func (e *QuorumError) Unwrap() []error { return append([]error{ErrNoQuorum}, e.Errs...) }

// invalid returns an error matching ErrInvalidArgument with a message that
// says what was wrong.
func invalid(format string, args ...any) error { return argerr.New(format, args...) }

// notObtained joins ErrNotObtained with the reason the caller stopped
// waiting (a context error or ErrClosed), so errors.Is matches both.
func notObtained(cause error) error {
	return fmt.Errorf("%w: %w", ErrNotObtained, cause)
}

// needContext panics in the caller's goroutine if ctx is nil, as the
// standard library does (before any other argument is checked).
func needContext(ctx context.Context) {
	if ctx == nil {
		panic("dlock: nil Context")
	}
}
