package torture

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/guard"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Resource is the fenced resource the clients write to: a redis-server of
// its own (no fault touches it) whose one key is written through the
// shipped guard.Redis, so that the product is what the checker exercises.
// The guarded script appends each accepted write to the key, a list, in
// the step that admits it: the list is the order the guard accepted them
// in. Refused writes are reported by their writers ("refused" events).
type Resource struct {
	srv *redistest.Server
}

// Write is one write the resource decided.
type Write struct {
	Client   int   // the writer's ID
	Fence    int64 // the writer's fence
	Grant    int64 // the writer's grant time (wall clock, ns): which grant it wrote under
	Accepted bool  // whether the resource took it
	At       int64 // when the writer sent it (wall clock, ns)
}

// resourceKey is the resource's key: the list of accepted writes.
const resourceKey = "torture:resource"

// logWrite appends "client fence grant sent" to the resource, if the
// guard admits the fence.
var logWrite = guard.NewScript(`return redis.call('RPUSH', KEYS[1], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])`)

// NewResource starts the resource's server on a loopback port.
func NewResource() (*Resource, error) {
	s, err := redistest.Spawn()
	if err != nil {
		return nil, err
	}
	return &Resource{srv: s}, nil
}

// Addr is where clients connect.
func (r *Resource) Addr() string { return r.srv.Addr() }

// Log returns the accepted writes, in the order the guard accepted them.
func (r *Resource) Log() ([]Write, error) {
	rdb := redis.NewClient(r.srv.Options())
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lines, err := rdb.LRange(ctx, resourceKey, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Write, 0, len(lines))
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 {
			continue
		}
		client, _ := strconv.Atoi(f[0])
		fence, _ := strconv.ParseInt(f[1], 10, 64)
		grant, _ := strconv.ParseInt(f[2], 10, 64)
		at, _ := strconv.ParseInt(f[3], 10, 64)
		out = append(out, Write{Client: client, Fence: fence, Grant: grant, Accepted: true, At: at})
	}
	return out, nil
}

// Close stops the resource's server.
func (r *Resource) Close() { r.srv.Close() }

// writer is a client's side of the resource: the guarded write.
type writer struct {
	rdb *redis.Client
	g   *guard.Redis
}

func newWriter(addr string) *writer {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	return &writer{rdb: rdb, g: guard.NewRedis(rdb)}
}

// write sends client's write under fence (granted at grant), and reports
// whether the guard refused it for a higher fence.
func (w *writer) write(client int, fence, grant int64) (refused bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = w.g.Run(ctx, logWrite, fence, []string{resourceKey}, client, fence, grant, time.Now().UnixNano())
	if errors.Is(err, guard.ErrStaleFence) {
		return true, nil
	}
	return false, err
}

func (w *writer) close() { w.rdb.Close() }
