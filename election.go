package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/tokens"
)

// Leader election: the leadership is a *Lock, a campaign a Lock waiting in
// the key's queue (standbys take over in order); the value travels in the
// token (after '.', base64), the term is the fence. Observers hear
// "elected" and "resigned"; a lapse publishes nothing, so an observer reads
// again when the lease was due to end, and every observeBackstop.

// observeBackstop: how often an observer reads the leader while none leads.
const observeBackstop = 5 * time.Second

// maxCandidateValue is the longest value a candidate may campaign with.
const maxCandidateValue = 1024

// ErrNoLeader is returned by Leader when nobody leads the election.
var ErrNoLeader = errors.New("dlock: no leader")

// ErrWrongKind is returned when a key is used as one kind of lock (an
// election, a semaphore, a read-write lock) but holds another: a plain
// Lock's key read as an election, a semaphore's key locked as a mutex.
// Nothing is changed.
var ErrWrongKind = errors.New("dlock: the key holds another kind of lock")

// Election is a leader election on one key: one leader at a time.
type Election struct {
	c   *Client
	key string
}

// Leader is who leads an election.
type Leader struct {
	Value string // what the leader campaigned with (a host name, an address)
	Term  int64  // its leadership's fence: strictly greater for every new leadership
}

// Election returns the election on key. Its key is a lock key: Lock and
// Inspect on it see the leadership as a lock.
func (c *Client) Election(key string) *Election { return &Election{c: c, key: key} }

// Campaign waits until this caller is elected (or ctx ends: an error
// matching ErrNotObtained and ctx.Err()), and returns the leadership: a
// Lock whose Fence is the term, whose Context ends when the leadership is
// lost, and whose Unlock resigns. It renews the leadership while the
// process lives (WithAutoRenew is implied); WithTTL bounds how long a dead
// leader blocks its standbys, WithMaxHold how long one may lead. value (at
// most 1024 bytes) is what Leader and Observe report for this leader.
func (e *Election) Campaign(ctx context.Context, value string, opts ...Option) (*Lock, error) {
	return e.campaign(ctx, value, opts, e.c.Lock)
}

// TryCampaign makes one attempt to be elected, as TryLock does: the
// leadership if the election is free, else an error matching
// ErrNotObtained at once, without joining the line. The leadership is
// Campaign's.
func (e *Election) TryCampaign(ctx context.Context, value string, opts ...Option) (*Lock, error) {
	return e.campaign(ctx, value, opts, e.c.TryLock)
}

// campaign is Campaign and TryCampaign: obtain is how the leadership's
// lock is taken.
func (e *Election) campaign(ctx context.Context, value string, opts []Option, obtain func(context.Context, string, ...Option) (*Lock, error)) (*Lock, error) {
	needContext(ctx)
	if len(value) > maxCandidateValue {
		return nil, invalid("candidate value of %d bytes: at most %d", len(value), maxCandidateValue)
	}
	opts = append(append([]Option{WithAutoRenew()}, opts...), candidate(value))
	l, err := obtain(ctx, e.key, opts...)
	if err != nil {
		return nil, err
	}
	l.onRelease(func() { e.announce("resigned") })
	e.announce("elected")
	return l, nil
}

// candidate makes the acquisition's token carry value.
func candidate(value string) Option {
	return func(o *options) { o.candidate, o.value = true, value }
}

// announce publishes msg on the election's channel on every node, best
// effort: an observer that misses it reads the leader on its timer.
func (e *Election) announce(msg string) {
	ch := keyspace.Elect(e.key)
	for _, n := range e.c.nodes {
		e.c.cleanup(func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			_ = n.RDB.Do(ctx, n.Publish(), ch, msg).Err()
		})
	}
}

// Leader returns who leads now, or an error matching ErrNoLeader when
// nobody does, or ErrWrongKind for a key a plain Lock holds. With Redlock,
// the leader holds the key on a majority of nodes, and the term is the
// highest fence they remember: the leadership's Fence, or above it if a
// node granted only after the node timeout.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	needContext(ctx)
	ld, _, err := e.leader(ctx)
	return ld, err
}

// leader is Leader with the leadership's remaining TTL.
func (e *Election) leader(ctx context.Context) (Leader, time.Duration, error) {
	o, err := e.c.prepare(e.key, nil)
	if err != nil {
		return Leader{}, 0, err
	}
	answers := e.c.inspectAll(ctx, e.key, "", o.nodeTimeoutFor(len(e.c.nodes)), "leader")
	h, err := majorityHolder(ctx, answers)
	switch {
	case err != nil:
		return Leader{}, 0, err
	case !h.held:
		return Leader{}, 0, fmt.Errorf("%w: %q", ErrNoLeader, e.key)
	}
	value, ok := tokens.Value(h.token)
	if !ok {
		return Leader{}, 0, fmt.Errorf("%w: %q is held by a lock that is not a campaign", ErrWrongKind, e.key)
	}
	return Leader{Value: value, Term: h.fence}, h.ttl, nil
}

// Observe starts watching who leads: its Observation's channel C receives
// the current leader, then every change: a new leader (a new Term), or the
// zero Leader when nobody leads. A receiver that falls behind gets the
// latest state. A standby learns of a new leader within milliseconds, of a
// lapse within its TTL; while Redis cannot be read, Observe keeps trying.
//
// C is closed when ctx ends, when the Client is closed, or at once for an
// invalid key (ErrInvalidArgument) or one held by a lock that is not a
// campaign (ErrWrongKind); Err says which. A nil ctx panics.
func (e *Election) Observe(ctx context.Context) *Observation {
	needContext(ctx)
	out := make(chan Leader)
	o := &Observation{C: out}
	if _, err := e.c.prepare(e.key, nil); err != nil {
		o.err = err
		close(out)
		return o
	}
	poke := make(chan struct{}, 1)
	e.c.spawn(func() {
		defer close(out)
		ctx, unbind := e.c.bind(ctx)
		defer unbind()
		ch := keyspace.Elect(e.key)
		for _, n := range e.c.nodes {
			w, _ := e.c.watch(n, ch, func(string) {
				select {
				case poke <- struct{}{}:
				default:
				}
			})
			defer w.stop()
		}
		err := e.observe(ctx, out, poke)
		o.mu.Lock()
		o.err = err
		o.mu.Unlock()
	})
	return o
}

// An Observation is a running Observe.
type Observation struct {
	// C receives the leader, then every change; it is closed when the
	// Observation ends (see Err).
	C <-chan Leader

	mu  sync.Mutex
	err error
}

// Err returns why C was closed: the context's error, ErrClosed, or an error
// matching ErrInvalidArgument or ErrWrongKind. It is set before C is
// closed; read before that, it may be nil.
func (o *Observation) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// observe is Observe's loop: read the leader, send it if changed, and wait
// for a message, the lease's end or the backstop. It returns why it
// stopped: ctx's cause, or an error no retry can mend.
func (e *Election) observe(ctx context.Context, out chan<- Leader, poke <-chan struct{}) error {
	var last Leader
	sent := false
	retry := minRetryWait
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-poke:
		case <-timer.C:
		}
		ld, ttl, err := e.leader(ctx)
		wait := observeBackstop
		switch {
		case err == nil:
			wait, retry = min(max(ttl, 0)+time.Millisecond, observeBackstop), minRetryWait
		case errors.Is(err, ErrNoLeader):
			ld, retry = Leader{}, minRetryWait
		case errors.Is(err, ErrWrongKind), errors.Is(err, ErrInvalidArgument):
			return err
		default:
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			wait, retry = retry, min(2*retry, maxRetryWait)
			timer.Reset(wait)
			continue
		}
		if !sent || ld != last {
			select {
			case out <- ld:
				last, sent = ld, true
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		timer.Reset(wait)
	}
}
