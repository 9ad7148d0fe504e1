package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one Redis deployment: a standalone server (or a Sentinel-managed
// failover client), or a Redis Cluster, and how scripts reach it.
type Node struct {
	RDB     Client
	Cluster ClusterClient // RDB, when it is a cluster client (sharded pub/sub); else nil
	Name    string        // address(es), for errors, or "node i"; never credentials
	Addr    string        // the address(es) that tell the node apart, when known
	// BlockLimit is the longest a blocking command (WAIT) may wait on the
	// server: half the client's read timeout, so that go-redis does not
	// time out first.
	BlockLimit time.Duration

	co        *coalescer   // how its scripts travel (pipeline.go)
	sub       *subscriber  // its pub/sub channels (subscriber.go)
	refreshed atomic.Int64 // when Refresh last asked for a cluster map reload (unix ns)
}

// NewNode returns the node for rdb; i is its place among the Client's
// nodes, which names it when its address is unknown, and block the
// longest WAIT when the client has no read timeout.
func NewNode(rdb Client, i int, block time.Duration) *Node {
	n := &Node{RDB: rdb, BlockLimit: block, Name: fmt.Sprintf("node %d", i)}
	n.Cluster, _ = rdb.(ClusterClient)
	var readTimeout time.Duration
	switch c := rdb.(type) {
	case interface{ Options() *redis.Options }:
		readTimeout = c.Options().ReadTimeout
		if addr := c.Options().Addr; addr != FailoverAddr {
			n.Name, n.Addr = addr, addr
		}
	case interface{ Options() *redis.ClusterOptions }:
		n.Name, readTimeout = strings.Join(c.Options().Addrs, ","), c.Options().ReadTimeout
		n.Addr = n.Name
	}
	if readTimeout > 0 {
		n.BlockLimit = max(readTimeout/2, 10*time.Millisecond)
	}
	n.co = newCoalescer(rdb)
	n.sub = newSubscriber(n)
	return n
}

// Run runs s on the node (see coalescer).
func (n *Node) Run(ctx context.Context, s *Script, keys []string, args ...any) *redis.Cmd {
	return n.co.run(ctx, n.RDB, s, keys, args...)
}

// RunAcked runs s and WAIT in one round trip (WithReplicaAck): s's reply,
// and how many of replicas acknowledged its writes within timeout. As Run
// does, it returns by the time ctx ends, with an error whose late reply
// (s's) Settled and LateReply read.
func (n *Node) RunAcked(ctx context.Context, s *Script, keys []string, replicas int, timeout time.Duration, args ...any) (any, int, error) {
	if ctx.Done() == nil || !n.co.detach() {
		v, acked, _, err := n.runAcked(ctx, s, keys, replicas, timeout, args...)
		return v, acked, err
	}
	var (
		v     any
		acked int
		err   error
	)
	if late := n.co.await(ctx, func(r *reply) { v, acked, r.cmd, err = n.runAcked(ctx, s, keys, replicas, timeout, args...) }); late != nil {
		return nil, 0, late
	}
	return v, acked, err
}

// runAcked is RunAcked in the caller's goroutine; script is s's command.
func (n *Node) runAcked(ctx context.Context, s *Script, keys []string, replicas int, timeout time.Duration, args ...any) (any, int, *redis.Cmd, error) {
	for loaded := false; ; loaded = true {
		var script, wait *redis.Cmd
		_, err := n.RDB.Pipelined(ctx, func(p redis.Pipeliner) error {
			script = s.EvalSha(ctx, p, keys, args...)
			wait = p.Do(ctx, "WAIT", replicas, timeout.Milliseconds())
			return nil
		})
		if err != nil && noScript(script.Err()) && !loaded {
			if err := s.Load(ctx, n.RDB).Err(); err != nil {
				script.SetErr(err)
				return nil, 0, script, err
			}
			continue
		}
		if err := script.Err(); err != nil {
			return nil, 0, script, err
		}
		acked, err := wait.Int64()
		return script.Val(), int(acked), script, err
	}
}

// Watch subscribes to channel: w.C receives each message's payload
// ("resubscribed" after the connection was made again, when messages may
// have been lost), and is closed when the watch is cancelled or the node
// stops watching. ready is closed once the server has confirmed the
// subscription. The caller must Cancel the watch.
func (n *Node) Watch(channel string) (w *Watch, ready <-chan struct{}) {
	return n.sub.watch(channel)
}

// StopWatching ends the node's subscriptions: their connections are
// closed, and later watches are never ready.
func (n *Node) StopWatching() { n.sub.close() }

// Close stops pipelining the node's scripts, once every script using the
// pipeliner has its answer; later scripts go to the user's client as
// requests of their own.
func (n *Node) Close() { n.co.close() }

// Publish returns the command that announces on a key's channel: sharded
// pub/sub on a cluster, where plain PUBLISH would be broadcast to every
// node.
func (n *Node) Publish() string {
	if n.Cluster != nil {
		return "SPUBLISH"
	}
	return "PUBLISH"
}

// Refresh asks a cluster client to reload its map of slots when a node
// could not be reached: a network error (refused, reset, timed out: a dead
// host often answers nothing), not a reply. A master that died leaves
// go-redis's ClusterClient sending its slots' commands to the dead address
// until the map is reloaded, which it does by itself only on a MOVED reply
// (never coming from a dead node) or after ClusterStateReloadInterval (a
// minute by default): after a failover the replica that took over would
// stay unused for up to that long. The reload is asynchronous, at most one
// per clusterRefreshEvery.
func (n *Node) Refresh(err error) {
	r, ok := n.RDB.(interface{ ReloadState(context.Context) })
	var ne net.Error
	unreachable := errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
	ended := errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) // a net.Error too
	if !ok || !unreachable || ended {
		return
	}
	now := time.Now().UnixNano()
	last := n.refreshed.Load()
	if now-last < int64(clusterRefreshEvery) || !n.refreshed.CompareAndSwap(last, now) {
		return
	}
	r.ReloadState(context.Background())
}

// clusterRefreshEvery spaces a node's cluster map reloads (Refresh).
const clusterRefreshEvery = 250 * time.Millisecond

// Script is a Lua script with its hash boxed once as a command argument,
// which a pipelined script then does not box again on every run.
type Script struct {
	*redis.Script
	hash any
}

// NewScript returns the Script of src.
func NewScript(src string) *Script {
	s := redis.NewScript(src)
	return &Script{Script: s, hash: s.Hash()}
}
