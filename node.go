package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/ask"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/owner"
	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
	"github.com/redis/go-redis/v9"
)

// RedisClient is what dlock needs of a go-redis client: scripts (EVALSHA,
// then EVAL if the server lacks the script), single commands, a pipeline
// (WithReplicaAck sends the acquire and WAIT together), a transaction
// (Inspect's reads) and pub/sub.
// *redis.Client, *redis.ClusterClient, a Sentinel client
// (redis.NewFailoverClient), go-redis's AutoPipeliner and any client that
// wraps one (a fault injector, an instrumented client) have all of it. A
// cluster client is recognized by its MasterForKey method (dlock subscribes
// on each key's master: sharded pub/sub), a client's address, for errors,
// by its Options method. A script sent alone goes through the client's
// EvalSha and Eval (go-redis's Script.Run); many at once, through its
// Pipelined (internal/transport).
type RedisClient interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// node is one Redis deployment (transport.Node) with the protocol's state.
type node struct {
	*transport.Node
	// releases: Redlock releases under way here, which acquires await.
	releases quorum.Flights

	single  bool // the Client's only node: a mutex waits in line (line.go)
	publish any  // Publish(), boxed

	// The handover (line_handover.go): the Client's waiter name prefix
	// (and boxed, or "" on a Client of many nodes) and its waiters.
	own    string
	ownArg any
	wakes  *wakes
}

// newNode returns the node for rdb; i names it when its address is unknown.
func newNode(rdb RedisClient, i int) *node {
	n := &node{Node: transport.NewNode(rdb, i, linePoll), ownArg: argNone}
	n.publish = n.Publish()
	return n
}

// fail returns op's error on n: a usage error as it is, else a *NodeError.
func (n *node) fail(op string, err error) error {
	if kerr := kindError(err); kerr != nil {
		return kerr
	}
	n.Refresh(err)
	return &NodeError{Node: n.Name, Op: op, Err: err}
}

// Unanswered is the error of a request whose answer was not waited for: a
// *NodeError for the node timeout, the caller's context's error as it is.
func (n *node) Unanswered(op string, err error) error {
	if err == ask.ErrNodeTimeout {
		return n.fail(op, err)
	}
	return err
}

// grant is a node's answer to an acquire.
type grant struct {
	ok    bool
	fence int64         // when ok
	pttl  time.Duration // when not ok: the holder's remaining TTL, or <0 if unknown
}

// granted reports whether the node granted the lock.
func (g grant) granted() bool { return g.ok }

// acquire runs the acquire script: sets the key to token if it is free
// (and, on one node, nobody is queued), and issues the fence. listens
// marks the caller as a listener for the key's release messages if the key
// is taken (Redlock).
func (n *node) acquire(ctx context.Context, nm *lockNames, token string, o options, listens bool) (grant, error) {
	if n.fast(nm, token, o) {
		if g, slow, err := n.acquireFast(ctx, nm, token, o); !slow {
			return g, err
		}
	}
	if n.single {
		return n.acquireLine(ctx, nm, token, "", o)
	}
	args := append(make([]any, 0, 4), token, o.ttl.Milliseconds(), o.fenceKeep().Milliseconds())
	if listens {
		args = append(args, notifyMillis)
	}
	var (
		res   any
		err   error
		acked = -1
	)
	if o.replicas > 0 {
		res, acked, err = n.RunAcked(ctx, acquireScript, nm.acquire[:], o.replicas, o.replicaTimeout, slices.Clone(args)...)
	} else {
		res, err = n.Run(ctx, acquireScript, nm.acquire[:], args...).Result()
	}
	if err != nil {
		return grant{}, n.fail("acquire", err)
	}
	g, err := acquired(res, acked, o)
	if err != nil {
		return grant{}, n.fail("acquire", err)
	}
	return g, nil
}

// acquired reads the acquire script's reply res (acked: how many replicas
// acknowledged, with WithReplicaAck) as a grant: a fence as a string, a
// refusal's pttl as an integer; one value, not a table (docs/design.md).
func acquired(res any, acked int, o options) (grant, error) {
	switch r := res.(type) {
	case string:
		if acked >= 0 && acked < o.replicas {
			return grant{}, fmt.Errorf("%w: %d of %d within %v", ErrNoReplicaAck, acked, o.replicas, o.replicaTimeout)
		}
		fence, err := parseFence(r)
		if err != nil {
			return grant{}, err
		}
		return grant{ok: true, fence: fence}, nil
	case int64:
		return grant{pttl: holderTTL(r)}, nil
	}
	return grant{}, errors.New("unexpected reply from the acquire script")
}

// parseFence reads a fence that a script returned as a decimal string.
func parseFence(v any) (int64, error) {
	s, _ := v.(string)
	fence, err := strconv.ParseInt(s, 10, 64)
	if err != nil || fence <= 0 {
		return 0, fmt.Errorf("unexpected fence %q from a script", s)
	}
	return fence, nil
}

// holderTTL reads a PTTL reply: the holder's TTL, or -1 (no expiry, gone).
func holderTTL(v any) time.Duration {
	if ms, _ := v.(int64); ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return -1
}

// release deletes the key if it holds token, raises its fencing counter to
// at least fence (if > 0, then kept for keep), and hands the lock to the
// first live waiter, or announces it free to listeners. It reports whether
// the key held the token. A mutex on one node goes through the line's
// release (line.go), first its fast one if lean (the lock was not waited
// for: line_fast.go). A script: the delete and hand-off must be one atomic
// step, or a newcomer could take the lock in between and the queue lose
// its order.
func (n *node) release(ctx context.Context, nm *lockNames, token string, fence int64, keep time.Duration, lean bool) (bool, error) {
	if lean && n.fast(nm, token, options{}) {
		return n.releaseFast(ctx, nm, token, max(keep, lineClaim))
	}
	if n.single { // a shared hold is one node's: semaphore.go
		return n.releaseLine(ctx, nm, token, "", max(keep, lineClaim))
	}
	v, err := n.Run(ctx, releaseScript, nm.acquire[:], n.releaseArgs(token, fence, keep)...).Int64()
	if err != nil {
		return false, n.fail("release", err)
	}
	return v == 1, nil
}

// releaseArgs returns the release script's arguments: the token, and only
// what this release needs besides (fence and keep, publish command).
func (n *node) releaseArgs(token string, fence int64, keep time.Duration) []any {
	switch {
	case n.Cluster != nil:
		return []any{token, fence, keep.Milliseconds(), n.Publish()}
	case fence != 0:
		return []any{token, fence, keep.Milliseconds()}
	}
	return []any{token}
}

// extend resets the key's expiry to ttl if it holds token, keeps its
// fencing counter at least keep (fence.go), and says whether it did: a
// renewal's answer; Revoked is why, when the hold was revoked (Revoke).
func (n *node) extend(ctx context.Context, nm *lockNames, token string, ttl, keep time.Duration) (renewal, error) {
	var r any
	var err error
	switch {
	case tokens.Shared(token):
		r, err = n.Run(ctx, sharedExtendScript, []string{nm.key, nm.holders(), nm.fence(), keyspace.Revoked(nm.key)}, token, ttl.Milliseconds(), keep.Milliseconds()).Result()
	default:
		r, err = n.Run(ctx, extendScript, []string{nm.key, nm.fence(), keyspace.Revoked(nm.key)}, token, ttl.Milliseconds(), keep.Milliseconds()).Result()
	}
	if err != nil {
		return renewal{}, n.fail("extend", err)
	}
	why, _ := r.(string) // Revoke never stores an empty why
	return renewal{Extended: r == int64(1), Revoked: why}, nil
}

// renewal is one node's answer to a renewal.
type renewal struct {
	Extended bool
	Revoked  string // why the hold was revoked, if it was
}

// keyState is what one node holds for a lock key.
type keyState struct {
	value  string // the key's value; "" when absent
	exists bool
	pttl   time.Duration  // remaining TTL; negative when absent (-2) or without expiry (-1)
	fence  int64          // last fence issued; 0 when none is remembered
	queued int64          // waiters in the queue
	holds  []string       // the live holds: a string key's value, or a sorted set's unexpired members
	owners []owner.Record // the live holds' owner records (WithOwner), oldest first
}

// inspect reads key's value, TTL and fencing counter, the queue's length,
// the owner records and the server's time with plain read commands in one
// MULTI/EXEC (atomic, as a script would be; go-redis routes a cluster's by
// the key's slot), so that a read-only Redis user (docs/console.md) needs no
// EVAL, which would let it run any script, an endless one too. token, if not
// "", is a shared holder to look for.
func (n *node) inspect(ctx context.Context, key, token string) (keyState, error) {
	st, err := n.readKey(ctx, key, token)
	if errors.Is(err, ErrWrongKind) {
		return keyState{}, err
	}
	if err != nil {
		return keyState{}, n.fail("inspect", err)
	}
	return st, nil
}

// readKey is inspect's reads and what they say.
func (n *node) readKey(ctx context.Context, key, token string) (keyState, error) {
	var get, pttl, holders, fence, queued, owners, now *redis.Cmd
	_, err := n.RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Do(ctx, "GET", key)                             // first: a cluster's keyless TIME goes to its slot
		pttl = p.Do(ctx, "PTTL", key)                           // ms; -1: no expiry, -2: none
		holders = p.Do(ctx, "ZRANGE", key, 0, -1, "WITHSCORES") // a semaphore's or read-write lock's
		fence, queued = p.Do(ctx, "GET", keyspace.Fence(key)), p.Do(ctx, "ZCARD", keyspace.Queue(key))
		owners, now = p.Do(ctx, "HVALS", keyspace.Owner(key)), p.Do(ctx, "TIME")
		return nil
	})
	if failed := txFailure(err, get, pttl, holders, fence, queued, owners, now); failed != nil {
		return keyState{}, failed
	}
	t, _ := now.Slice()
	ms := serverMillis(t)
	var st keyState
	if f, _ := fence.Text(); f != "" {
		st.fence, _ = strconv.ParseInt(f, 10, 64)
	}
	st.queued, _ = queued.Int64()
	records, _ := owners.Slice()
	st.owners = owner.Live(records, ms)
	if v, err := get.Text(); err == nil {
		d, _ := pttl.Int64()
		st.value, st.exists, st.holds = v, true, []string{v}
		st.pttl = time.Duration(d) * time.Millisecond
		if d < 0 {
			st.pttl = time.Duration(d) // -1: no expiry
		}
		return st, nil
	}
	if get.Err() != redis.Nil && holders.Err() != nil { // neither a string nor a sorted set
		return keyState{}, holders.Err()
	}
	zs, _ := holders.Slice()
	return st, liveHolders(&st, zs, token, ms)
}

// txFailure returns why inspect's transaction failed, if it did: err (the
// transaction's), or the first command's error that is not the key's absence nor the other
// type's WRONGTYPE (GET of a sorted set, ZRANGE of a string), preferring
// the cause of an EXECABORT (NOPERM, say) to the abort itself.
func txFailure(err error, cmds ...*redis.Cmd) error {
	var abort error
	for _, c := range cmds {
		switch e := c.Err(); {
		case e == nil || e == redis.Nil || isWrongType(e):
		case strings.HasPrefix(e.Error(), "EXECABORT"):
			abort = e
		default:
			return e
		}
	}
	if abort == nil && err != nil && err != redis.Nil && !isWrongType(err) {
		return err // the connection's setup failed (SELECT, AUTH): no command has its error
	}
	return abort
}

// isWrongType reports a WRONGTYPE reply.
func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

// liveHolders fills st from a sorted set's holders zs (member, expiry in
// server ms, lowest first) at server time ms: token's hold if it has one,
// else the first live one, with the longest TTL any has left.
func liveHolders(st *keyState, zs []any, token string, ms int64) error {
	zs = flatPairs(zs)
	if len(zs) >= 2 && !strings.HasPrefix(fmt.Sprint(zs[0]), "~") {
		return ErrWrongKind // a sorted set, not dlock's
	}
	st.pttl = -2
	var tokens time.Duration
	for i := 0; i+1 < len(zs); i += 2 {
		member, exp := fmt.Sprint(zs[i]), scoreOf(zs[i+1])
		if exp <= ms {
			continue
		}
		st.holds = append(st.holds, member)
		if !st.exists || member == token {
			st.value, st.exists = member, true
		}
		st.pttl = time.Duration(exp-ms) * time.Millisecond
		if member == token {
			tokens = st.pttl
		}
	}
	if tokens > 0 {
		st.pttl = tokens // token's own TTL, not the longest
	}
	return nil
}

// flatPairs flattens a ZRANGE WITHSCORES reply of RESP3 ([member, score]
// pairs) into RESP2's (member, score, member, score, ...).
func flatPairs(zs []any) []any {
	if len(zs) == 0 {
		return zs
	}
	if _, nested := zs[0].([]any); !nested {
		return zs
	}
	flat := make([]any, 0, 2*len(zs))
	for _, p := range zs {
		pair, _ := p.([]any)
		flat = append(flat, pair...)
	}
	return flat
}

// scoreOf reads a ZRANGE WITHSCORES score (a string, or a float on RESP3).
func scoreOf(v any) int64 {
	switch s := v.(type) {
	case float64:
		return int64(s)
	case string:
		f, _ := strconv.ParseFloat(s, 64)
		return int64(f)
	}
	return 0
}

// serverMillis is a TIME reply in milliseconds.
func serverMillis(t []any) int64 {
	if len(t) != 2 {
		return 0
	}
	sec, _ := strconv.ParseInt(fmt.Sprint(t[0]), 10, 64)
	usec, _ := strconv.ParseInt(fmt.Sprint(t[1]), 10, 64)
	return sec*1000 + usec/1000
}

// Direct returns rdb wrapped so that dlock sends every call through it as
// a request of its own, never in a pipeline (see New): for hooks that must
// see each script as a command of its own. The cost is the
// pipelining: under many concurrent scripts each is a request of its own on
// rdb's pool (docs/operating.md). A nil rdb panics, as in New.
func Direct(rdb *redis.Client) RedisClient {
	if rdb == nil {
		panic(invalid("Direct: nil client"))
	}
	return transport.Direct(rdb)
}

// watching is a subscription on a node whose payloads a goroutine of its
// own hands to the protocol (Client.watch): the transport only delivers
// them, on the Watch's channel.
type watching struct {
	w    *transport.Watch
	done chan struct{} // closed when the goroutine has ended
}

// watch subscribes to channel on n and passes each payload to fn, in a
// goroutine that Close waits for (spawn), which ends when stop cancels the
// subscription, or when the node stops watching (Close). ready is closed
// once the node has confirmed the subscription.
func (c *Client) watch(n *node, channel string, fn func(payload string)) (_ *watching, ready <-chan struct{}) {
	w, ready := n.Watch(channel)
	wt := &watching{w: w, done: make(chan struct{})}
	c.spawn(func() {
		defer close(wt.done)
		for p := range w.C {
			fn(p)
		}
	})
	return wt, ready
}

// stop cancels the subscription and waits for its goroutine to end.
func (wt *watching) stop() {
	wt.w.Cancel()
	<-wt.done
}
