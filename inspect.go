package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
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
	// Holders is how many hold the key: 1 for a held lock, the permits
	// taken of a semaphore, the read holds (or 1 write hold) of a
	// read-write lock. For those, Holder is one of them and TTL the
	// longest any has left.
	Holders int
	// Kind is what holds the key, while Held: "lock" (a Lock), "election"
	// (a campaign's leadership; Leader is its value), "semaphore" (with
	// Permits), "read" or "write" (holds of a read-write lock).
	Kind    string
	Permits int
	Leader  string
}

// describeHolder fills in st's Kind, Permits and Leader from a holder's
// token (its kind prefix, or a campaign's value: never its secret part).
func (st *Status) describeHolder(token string) {
	st.Kind = primitiveOf(token)
	switch st.Kind {
	case "semaphore":
		n, _, _ := strings.Cut(token[2:], "~")
		st.Permits, _ = strconv.Atoi(n)
	case "election":
		st.Leader, _ = tokenValue(token)
	}
}

// Inspect reports the state of the lock on key, as the nodes see it now,
// without changing anything. It needs no token. A key held under another
// version of dlock's format on Redis is reported, with an error matching
// ErrProtocol.
func (c *Client) Inspect(ctx context.Context, key string) (Status, error) {
	o, err := c.prepare(key, nil)
	if err != nil {
		return Status{}, err
	}
	answers := c.inspectAll(ctx, key, "", o.nodeTimeoutFor(len(c.nodes)), "inspect")
	st := Status{Key: key}
	for _, a := range answers {
		if a.Err == nil {
			st.Fence = max(st.Fence, a.V.fence)
			st.Waiters = max(st.Waiters, int(a.V.queued))
			st.Holders = max(st.Holders, int(a.V.held))
		}
	}
	h, err := majorityHolder(ctx, answers)
	if err != nil || h.token == "" {
		return st, err
	}
	st.Held, st.Holder, st.TTL = true, redact(h.token), h.ttl
	st.describeHolder(h.token)
	return st, otherVersion(h.token)
}

// holder is who holds a key on a majority of nodes: its token, its TTL
// (holding's) and the highest fence the nodes that hold it remember.
type holder struct {
	token string
	ttl   time.Duration
	fence int64
}

// majorityHolder finds the value a majority of nodes hold in answers. A
// zero holder means the key is free as far as a majority of answers can
// tell; fewer answers than that are an error (undecided).
func majorityHolder(ctx context.Context, answers []answer[keyState]) (holder, error) {
	values := map[string]bool{}
	for _, a := range answers {
		if a.Err == nil && a.V.exists {
			values[a.V.value] = true
		}
	}
	for token := range values {
		if v, d := holding(answers, token); v.Of(len(answers)) == transport.Agreed {
			return holder{token: token, ttl: d, fence: holdersFence(answers, token)}, nil
		}
	}
	if answered := count(answers, func(keyState) bool { return true }); answered.Of(len(answers)) != transport.Agreed {
		return holder{}, undecided(answered, ctx.Err(), len(answers))
	}
	return holder{}, nil
}

// holdersFence is the highest fence remembered by the nodes that hold
// token.
func holdersFence(answers []answer[keyState], token string) int64 {
	var fence int64
	for _, a := range answers {
		if a.Err == nil && a.V.exists && a.V.value == token {
			fence = max(fence, a.V.fence)
		}
	}
	return fence
}

// inspectAll reads key's state on every node (op names the caller, for
// errors); token, if not "", is the holder to look for among a
// semaphore's or read-write lock's holders.
func (c *Client) inspectAll(ctx context.Context, key, token string, timeout time.Duration, op string) []answer[keyState] {
	return round[keyState, inspection]{Op: op, Timeout: timeout,
		By: inspection{key, token}, Call: inspection.on,
	}.Ask(nil, ctx, c.work, c.nodes)
}

// inspection is a question inspectAll asks: key's state, and whether token
// is among its holders.
type inspection struct{ key, token string }

// on reads the state on n.
func (q inspection) on(ctx context.Context, n *node) (keyState, error) {
	return n.inspect(ctx, q.key, q.token)
}

// holding counts inspect answers for a lock whose value is token: a yes
// from each node that holds it, a no from each that holds something else
// or nothing. d is the majority-th longest TTL of those that hold it: the
// lock lasts while a majority does.
func holding(answers []answer[keyState], token string) (v transport.Votes, d time.Duration) {
	v = count(answers, func(st keyState) bool { return st.exists && st.value == token })
	var ttls []time.Duration
	for _, a := range answers {
		if a.Err == nil && a.V.exists && a.V.value == token {
			ttls = append(ttls, a.V.pttl)
		}
	}
	if q := transport.Majority(len(answers)); len(ttls) >= q {
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		d = ttls[q-1]
	}
	return v, d
}

// Attach returns a Lock for a lock obtained elsewhere — by another process,
// or by `dlock lock` in a shell script — from its key and token, so that it
// can be extended, inspected or released here. It checks that the key still
// holds the token (on a majority of nodes) and returns an error matching
// ErrNotHeld if not. The Lock's Context deadline comes from the remaining
// TTL; its Fence is the fence the holding nodes remember. opts apply to what
// the Lock does from now on: WithTTL sets the TTL of renewals,
// WithAutoRenew starts a watchdog, WithMaxHold counts from now. A token of
// another version of dlock's format on Redis is ErrProtocol.
func (c *Client) Attach(ctx context.Context, key, token string, opts ...Option) (*Lock, error) {
	o, err := c.prepare(key, opts)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, invalid("empty token")
	}
	if err := otherVersion(token); err != nil {
		return nil, err
	}
	sent := time.Now()
	answers := c.inspectAll(ctx, key, token, o.nodeTimeoutFor(len(c.nodes)), "inspect")
	v, d := holding(answers, token)
	switch v.Of(len(c.nodes)) {
	case transport.Agreed:
		fence := holdersFence(answers, token)
		if d < MinTTL {
			return nil, fmt.Errorf("%w: %q is about to expire: %w", ErrNotHeld, key, ErrLeaseExpired)
		}
		return newLock(c, c.names.get(key), token, fence, o, sent, d), nil
	case transport.Refused:
		return nil, fmt.Errorf("%w: %q", ErrNotHeld, key)
	}
	return nil, undecided(v, ctx.Err(), len(c.nodes))
}
