package dlock

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conformance of the go-redis clients dlock supports.
var (
	_ redis.UniversalClient = (*redis.Client)(nil)
	_ redis.UniversalClient = (*redis.ClusterClient)(nil)
)

// Native (server-side) conditional commands: Redis 8.4 added DELEX key IFEQ
// value and SET ... IFEQ value, which do what the release and extend scripts
// do without Lua. Detected once per node.
const (
	nativeUnknown int32 = iota
	nativeAbsent
	nativePresent
)

// node is one Redis deployment dlock talks to: a standalone server (or a
// Sentinel-managed failover client), or a Redis Cluster.
type node struct {
	rdb     redis.UniversalClient
	name    string // address(es), for errors; never credentials
	cluster bool   // Redis Cluster: sharded pub/sub
	native  atomic.Int32
	sub     *subscriber
}

func newNode(rdb redis.UniversalClient) *node {
	n := &node{rdb: rdb}
	switch c := rdb.(type) {
	case *redis.Client:
		n.name = c.Options().Addr
	case *redis.ClusterClient:
		n.name = strings.Join(c.Options().Addrs, ",")
		n.cluster = true
	case *redis.Ring:
		n.name = "ring"
	default:
		n.name = "node"
	}
	n.sub = newSubscriber(n)
	return n
}

func (n *node) fail(op string, err error) error {
	return &NodeError{Node: n.name, Op: op, Err: err}
}

// grant is a node's answer to an acquire.
type grant struct {
	ok    bool
	fence int64         // when ok
	pttl  time.Duration // when not ok: the holder's remaining TTL, or <0 if unknown
}

func (n *node) acquire(ctx context.Context, key, token string, ttl time.Duration) (grant, error) {
	keys := []string{key, fenceKey(key)}
	res, err := acquireScript.Run(ctx, n.rdb, keys, token, ttl.Milliseconds(), fenceRetention(ttl).Milliseconds()).Slice()
	if err != nil {
		return grant{}, n.fail("acquire", err)
	}
	if len(res) != 2 {
		return grant{}, n.fail("acquire", errors.New("unexpected reply from the acquire script"))
	}
	switch ok, _ := res[0].(int64); ok {
	case 1:
		s, _ := res[1].(string)
		fence, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return grant{}, n.fail("acquire", errors.New("unexpected fence from the acquire script"))
		}
		return grant{ok: true, fence: fence}, nil
	default:
		pttl, _ := res[1].(int64)
		d := time.Duration(-1)
		if pttl > 0 {
			d = time.Duration(pttl) * time.Millisecond
		}
		return grant{pttl: d}, nil
	}
}

// release deletes key if it holds token, raises key's fencing counter to at
// least fence (when fence > 0; ttl sets the counter's retention), and wakes
// waiters. It reports whether the key held the token.
func (n *node) release(ctx context.Context, key, token string, fence int64, ttl time.Duration) (bool, error) {
	if fence == 0 && n.hasNative(ctx) {
		var del *redis.IntCmd
		_, err := n.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			del = redis.NewIntCmd(ctx, "DELEX", key, "IFEQ", token)
			_ = p.Process(ctx, del)
			// Unconditional: a wake-up for a release that did not happen
			// only costs a waiter one more attempt.
			if n.cluster {
				p.SPublish(ctx, wakeChannel(key), "released")
			} else {
				p.Publish(ctx, wakeChannel(key), "released")
			}
			return nil
		})
		if err != nil {
			return false, n.fail("release", err)
		}
		return del.Val() == 1, nil
	}
	pub := "PUBLISH"
	if n.cluster {
		pub = "SPUBLISH"
	}
	keys := []string{key, fenceKey(key)}
	v, err := releaseScript.Run(ctx, n.rdb, keys, token, pub, wakeChannel(key), fence, fenceRetention(ttl).Milliseconds()).Int64()
	if err != nil {
		return false, n.fail("release", err)
	}
	return v == 1, nil
}

// extend resets key's expiry to ttl if it holds token, and reports whether it
// did.
func (n *node) extend(ctx context.Context, key, token string, ttl time.Duration) (bool, error) {
	if n.hasNative(ctx) {
		err := n.rdb.Do(ctx, "SET", key, token, "IFEQ", token, "PX", ttl.Milliseconds()).Err()
		if errors.Is(err, redis.Nil) {
			return false, nil
		}
		if err != nil {
			return false, n.fail("extend", err)
		}
		return true, nil
	}
	v, err := extendScript.Run(ctx, n.rdb, []string{key}, token, ttl.Milliseconds()).Int64()
	if err != nil {
		return false, n.fail("extend", err)
	}
	return v == 1, nil
}

// keyState is what one node holds for a lock key.
type keyState struct {
	value  string // the key's value; "" when absent
	exists bool
	pttl   time.Duration // remaining TTL; negative when absent (-2) or without expiry (-1)
	fence  int64         // last fence issued; 0 when none is remembered
}

// inspect reads key's value, TTL and fencing counter atomically.
func (n *node) inspect(ctx context.Context, key string) (keyState, error) {
	res, err := inspectScript.Run(ctx, n.rdb, []string{key, fenceKey(key)}).Slice()
	if err != nil {
		return keyState{}, n.fail("inspect", err)
	}
	if len(res) != 3 {
		return keyState{}, n.fail("inspect", errors.New("unexpected reply from the inspect script"))
	}
	var st keyState
	st.value, st.exists = res[0].(string)
	pttl, _ := res[1].(int64)
	st.pttl = time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		st.pttl = time.Duration(pttl)
	}
	if s, ok := res[2].(string); ok {
		st.fence, _ = strconv.ParseInt(s, 10, 64)
	}
	return st, nil
}

// hasNative reports whether the node has DELEX and SET IFEQ (Redis 8.4+).
// The first call asks the server (COMMAND INFO DELEX); the answer is kept.
// If asking fails, the scripts are used and the question is asked again next
// time; a server that refuses COMMAND (e.g. an ACL without it) is taken as
// not having them.
func (n *node) hasNative(ctx context.Context) bool {
	switch n.native.Load() {
	case nativePresent:
		return true
	case nativeAbsent:
		return false
	}
	res, err := n.rdb.Do(ctx, "COMMAND", "INFO", "DELEX").Slice()
	switch {
	case err == nil:
		state := nativeAbsent
		if commandInfoFound(res) {
			state = nativePresent
		}
		n.native.Store(state)
		return state == nativePresent
	case isRedisError(err):
		n.native.Store(nativeAbsent)
	}
	return false
}

// commandInfoFound reports whether a COMMAND INFO reply for one command
// describes it: the reply is a one-element array whose element is nil for an
// unknown command.
func commandInfoFound(reply []any) bool {
	return len(reply) == 1 && reply[0] != nil
}

// isRedisError reports whether err is an error reply from the server (as
// opposed to a network or client error).
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
