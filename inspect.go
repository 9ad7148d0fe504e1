package dlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
)

// Status is what Inspect sees of a lock key.
type Status struct {
	Key string // the lock's key
	// Held reports whether a majority of nodes (the one node, on a single
	// node) hold the key with the same value, whoever set it.
	Held bool
	// TTL is the remaining lease while Held: the majority-th longest TTL of
	// the holding nodes; negative for a key without expiry (not dlock's).
	TTL time.Duration
	// Fence is the last fence issued: the highest any node remembers, or 0.
	Fence int64
	// Holder is the start of the holder's token: not enough to release it.
	Holder string
	// Waiters is how many Lock calls are queued (the most any node has).
	Waiters int
	// Holders is how many hold the key: 1 for a lock, a semaphore's permits
	// taken, a read-write lock's read holds (or 1 write hold). For those,
	// Holder is one of them and TTL the longest any has left.
	Holders int
	// Kind is what holds the key, while Held: "lock" (a Lock), "election"
	// (a campaign's leadership; Leader is its value), "semaphore" (with
	// Permits) or "rwmutex" (a read-write lock; Mode says how it is held).
	// Event.Primitive and the command's --json use the same words.
	Kind string
	// Mode is how an rwmutex is held: "read" (Holders readers) or "write"
	// (one writer); "" for every other Kind.
	Mode    string
	Permits int
	Leader  string
	// Owners are the owner records (WithOwner) of the holds that have one,
	// oldest first: who holds the lock, and since when.
	Owners []Owner
}

// IsDlock reports whether the key is a lock of dlock's: a semaphore's or
// read-write lock's holders (their members carry their kind), or a key
// beside which dlock keeps a fence counter or a wait queue. Every grant
// sets the counter, for longer than the lock's TTL, so a held key without
// one was set by someone else (a cache entry, another library's lock).
// `dlock ls` and the console show only these.
func (st Status) IsDlock() bool {
	return tokens.IsDlock(st.Kind, st.Fence, st.Waiters)
}

// describeHolder fills in st's Kind, Mode, Permits and Leader from a
// holder's token (its kind prefix, or a campaign's value: never its secret
// part).
func (st *Status) describeHolder(token string) {
	st.Kind, st.Mode = tokens.Primitive(token), tokens.Mode(token)
	switch st.Kind {
	case "semaphore":
		n, _, _ := strings.Cut(token[2:], "~")
		st.Permits, _ = strconv.Atoi(n)
	case "election":
		st.Leader, _ = tokens.Value(token)
	}
}

// Inspect reports the state of the lock on key as the nodes see it now,
// without changing anything or needing a token. A key held under another
// version of dlock's format on Redis is reported, with ErrProtocol.
func (c *Client) Inspect(ctx context.Context, key string) (Status, error) {
	needContext(ctx)
	o, err := c.prepare(key, nil)
	if err != nil {
		return Status{}, err
	}
	return c.status(ctx, key, o.nodeTimeoutFor(len(c.nodes)))
}

// status is Inspect's reads, each node's bounded by timeout (0: none).
func (c *Client) status(ctx context.Context, key string, timeout time.Duration) (Status, error) {
	return statusOf(ctx, key, c.inspectAll(ctx, key, "", timeout, "inspect"))
}

// statusOf is the Status of key that the nodes' answers say.
func statusOf(ctx context.Context, key string, answers []answer[keyState]) (Status, error) {
	st := Status{Key: key}
	for _, a := range answers {
		if a.Err == nil {
			st.Fence = max(st.Fence, a.V.fence)
			st.Waiters = max(st.Waiters, int(a.V.queued))
			st.Holders = max(st.Holders, len(a.V.holds))
		}
	}
	h, err := majorityHolder(ctx, answers)
	if err != nil || !h.held {
		return st, err
	}
	st.Held, st.Holder, st.TTL = true, tokens.Redact(h.token), h.ttl
	st.describeHolder(h.token)
	st.Owners = ownersOf(answers)
	if !tokens.Shared(h.token) { // one holder: a record left by the one before it is not its
		st.Owners = slices.DeleteFunc(st.Owners, func(o Owner) bool { return o.Holder != st.Holder })
	}
	return st, otherVersion(h.token)
}

// holder is who holds a key on a majority of nodes: its token, its TTL
// (holding's) and the highest fence the nodes that hold it remember.
type holder struct {
	held  bool // a value an empty string is still held: SET NX cannot take it
	token string
	ttl   time.Duration
	fence int64
}

// majorityHolder finds the value a majority of nodes hold in answers; a
// zero holder: free, as far as a majority can tell (fewer: undecided).
func majorityHolder(ctx context.Context, answers []answer[keyState]) (holder, error) {
	values := map[string]bool{}
	for _, a := range answers {
		if a.Err == nil && a.V.exists {
			values[a.V.value] = true
		}
	}
	for token := range values {
		if v, d := holding(answers, token); v.Of(len(answers)) == quorum.Agreed {
			return holder{held: true, token: token, ttl: d, fence: holdersFence(answers, token)}, nil
		}
	}
	if answered := count(answers, func(keyState) bool { return true }); answered.Of(len(answers)) != quorum.Agreed {
		return holder{}, undecided(answered, ctx.Err(), len(answers))
	}
	return holder{}, nil
}

// holdersFence is the highest fence the nodes that hold token remember.
func holdersFence(answers []answer[keyState], token string) int64 {
	var fence int64
	for _, a := range answers {
		if a.Err == nil && a.V.exists && a.V.value == token {
			fence = max(fence, a.V.fence)
		}
	}
	return fence
}

// inspectAll reads key's state on every node (op names the caller); token,
// if not "", is a shared holder to look for.
func (c *Client) inspectAll(ctx context.Context, key, token string, timeout time.Duration, op string) []answer[keyState] {
	return round[keyState]{Op: op, Timeout: timeout,
		Call: func(ctx context.Context, n *node) (keyState, error) { return n.inspect(ctx, key, token) },
	}.Ask(ctx, c.work, c.nodes)
}

// holding counts inspect answers: yes from each node that holds token, no
// from the others. d is the majority-th longest TTL of the holding nodes:
// the lock lasts while a majority does.
func holding(answers []answer[keyState], token string) (v quorum.Votes, d time.Duration) {
	v = count(answers, func(st keyState) bool { return st.exists && st.value == token })
	var ttls []time.Duration
	for _, a := range answers {
		if a.Err == nil && a.V.exists && a.V.value == token {
			ttls = append(ttls, a.V.pttl)
		}
	}
	if q := quorum.Majority(len(answers)); len(ttls) >= q {
		slices.SortFunc(ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		d = ttls[q-1]
	}
	return v, d
}

// Attach returns a Lock for a lock obtained elsewhere (another process,
// `dlock lock` in a shell script) from its key and token, to extend,
// inspect or release it here. It returns an error matching ErrNotHeld
// unless the key holds the token on a majority of nodes, and ErrProtocol
// for a token of another format version. The Context's deadline comes from
// the remaining TTL, the Fence from the holding nodes. opts apply from now
// on: WithTTL to renewals, WithAutoRenew, WithMaxHold counted from now.
func (c *Client) Attach(ctx context.Context, key, token string, opts ...Option) (*Lock, error) {
	needContext(ctx)
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
	case quorum.Agreed:
		fence := holdersFence(answers, token)
		if d < MinTTL {
			return nil, fmt.Errorf("%w: %q is about to expire: %w", ErrNotHeld, key, ErrLeaseExpired)
		}
		return newLock(c, namesOf(key), token, fence, o, sent, d), nil
	case quorum.Refused:
		return nil, fmt.Errorf("%w: %q", ErrNotHeld, key)
	}
	return nil, undecided(v, ctx.Err(), len(c.nodes))
}
