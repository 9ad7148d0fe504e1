// Package transport is how dlock's scripts reach Redis: one node (a
// server, a Sentinel-managed master or a cluster) through the user's
// go-redis client, pipelined through a client of dlock's own when many
// goroutines send at once, and its pub/sub channels. It only sends and
// receives: a call returns its reply, or an error from which the late
// reply can be read once it has come (Settled, LateReply), and it never
// calls a function of the protocol's. It knows nothing of locks: the
// protocol above decides what to send, whom to ask (internal/ask) and what
// the answers mean.
package transport

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Client is what dlock needs of a go-redis client (dlock.RedisClient):
// scripts (EVALSHA, with EVAL when the server does not have the script
// yet), single commands, a pipeline (WithReplicaAck sends the acquire and
// WAIT together), a transaction (Inspect's reads) and pub/sub. *redis.Client, *redis.ClusterClient, a
// Sentinel-managed client (redis.NewFailoverClient) and go-redis's
// AutoPipeliner have all of it, as does any client that wraps one (a fault
// injector, an instrumented client).
//
// A cluster client is recognized by its MasterForKey method, which dlock
// uses to subscribe on the master of each key's slot (sharded pub/sub); a
// client's address, for errors, by its Options method. A script sent alone
// goes through the client's own EvalSha and Eval (go-redis's Script.Run).
type Client interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// ClusterClient is a Client over a Redis Cluster.
type ClusterClient interface {
	Client
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// The go-redis clients dlock is tested with.
var (
	_ Client        = (*redis.Client)(nil)
	_ ClusterClient = (*redis.ClusterClient)(nil)
	_ Client        = (*redis.AutoPipeliner)(nil)
	_ Client        = redis.UniversalClient(nil)
)

// FailoverAddr is what go-redis gives as the address of every Sentinel
// failover client (redis.NewFailoverClient), whatever its master: it tells
// nothing apart.
const FailoverAddr = "FailoverClient"

// Direct returns rdb wrapped so that every call goes through it, never
// pipelined through a client of dlock's own (dlock.Direct).
func Direct(rdb *redis.Client) Client { return direct{rdb} }

// direct is Direct's wrapper: a Client that is not a *redis.Client.
type direct struct{ *redis.Client }

// IsRedisError reports whether err is an error reply from the server (as
// opposed to a network or client error).
func IsRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
