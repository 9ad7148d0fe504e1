package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// Status is what Inspect sees of a lock key.
type Status struct {
	Key string // the lock's key
	// Held reports whether a majority of nodes (the one node, on a single
	// node) hold the key with the same value, whoever set it.
	Held bool
	// TTL is the remaining lease while Held: the majority-th longest TTL
	// among the nodes that hold it. Negative for a key without expiry
	// (set by hand, not by dlock).
	TTL time.Duration
	// Fence is the last fence issued for the key: the highest any node
	// remembers, 0 if none does.
	Fence int64
	// Holder is the first characters of the holder's token (its value),
	// enough to tell holders apart, not enough to release the lock.
	Holder string
	// Waiters is how many Lock calls are queued for the key (the most any
	// node has; Redlock does not queue).
	Waiters int
}

// Inspect reports the state of the lock on key, as the nodes see it now,
// without changing anything. It needs no token.
func (c *Client) Inspect(ctx context.Context, key string) (Status, error) {
	o, err := c.prepare(key, nil)
	if err != nil {
		return Status{}, err
	}
	answers := fanout(c, ctx, c.nodes, o.nodeTimeoutFor(len(c.nodes)), "inspect",
		func(ctx context.Context, n *node) (keyState, error) { return n.inspect(ctx, key) }, nil)
	st := Status{Key: key}
	votes := map[string]int{}
	var failures []error
	for _, a := range answers {
		if a.err != nil {
			failures = append(failures, a.err)
			continue
		}
		st.Fence = max(st.Fence, a.v.fence)
		st.Waiters = max(st.Waiters, int(a.v.queued))
		if a.v.exists {
			votes[a.v.value]++
		}
	}
	for value, n := range votes {
		if n >= c.quorum() {
			st.Held, st.Holder = true, redact(value)
			st.TTL, _, _, _ = c.majorityTTL(answers, value)
		}
	}
	if !st.Held && len(answers)-len(failures) < c.quorum() {
		return st, c.undecided(ctx, len(answers)-len(failures), failures)
	}
	return st, nil
}

// majorityTTL reads a fan-out of inspect answers for a lock whose value is
// token: held when a majority holds it, with the majority-th longest TTL
// (the lock lasts while a majority holds it); notHeld when too many nodes
// hold something else or nothing for a majority to remain; otherwise
// undecided, with the nodes' failures.
func (c *Client) majorityTTL(answers []answer[keyState], token string) (d time.Duration, held, notHeld bool, failures []error) {
	var ttls []time.Duration
	others := 0
	for _, a := range answers {
		switch {
		case a.err != nil:
			failures = append(failures, a.err)
		case a.v.exists && a.v.value == token:
			ttls = append(ttls, a.v.pttl)
		default:
			others++
		}
	}
	q := c.quorum()
	if len(ttls) >= q {
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		return ttls[q-1], true, false, nil
	}
	return 0, false, others > len(c.nodes)-q, failures
}

// Attach returns a Lock for a lock obtained elsewhere — by another process,
// or by `dlock lock` in a shell script — from its key and token, so that it
// can be extended, inspected or released here. It checks that the key still
// holds the token (on a majority of nodes) and returns an error matching
// ErrNotHeld if not. The Lock's Context deadline comes from the remaining
// TTL; its Fence is the fence the holding nodes remember. opts apply to what
// the Lock does from now on: WithTTL sets the TTL of renewals,
// WithAutoRenew starts a watchdog, WithMaxHold counts from now.
func (c *Client) Attach(ctx context.Context, key, token string, opts ...Option) (*Lock, error) {
	o, err := c.prepare(key, opts)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, invalid("empty token")
	}
	sent := time.Now()
	answers := fanout(c, ctx, c.nodes, o.nodeTimeoutFor(len(c.nodes)), "inspect",
		func(ctx context.Context, n *node) (keyState, error) { return n.inspect(ctx, key) }, nil)
	d, held, notHeld, failures := c.majorityTTL(answers, token)
	switch {
	case held:
		var fence int64
		for _, a := range answers {
			if a.err == nil && a.v.exists && a.v.value == token {
				fence = max(fence, a.v.fence)
			}
		}
		if d < MinTTL {
			return nil, fmt.Errorf("%w: %q is about to expire: %w", ErrNotHeld, key, ErrLeaseExpired)
		}
		return newLock(c, c.names.get(key), token, fence, o, sent, d), nil
	case notHeld:
		return nil, fmt.Errorf("%w: %q", ErrNotHeld, key)
	}
	return nil, c.undecided(ctx, 0, failures)
}
