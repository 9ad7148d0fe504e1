package guard

import (
	"context"
	_ "embed"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/argerr"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/redis/go-redis/v9"
)

// DefaultRetention is how long a Redis guard keeps a resource's record after the
// resource is gone (see WithRetention).
const DefaultRetention = time.Hour

var (
	//go:embed scripts/guard_prelude.lua
	guardPreludeSrc string
	//go:embed scripts/guard.lua
	guardSrc    string
	guardScript = redis.NewScript(guardPreludeSrc + guardSrc)
	//go:embed scripts/guard_script.lua
	guardedScriptSrc string
)

// Redis guards writes to Redis resources: it lets one through only with a
// fence at least the highest the resource has accepted (see the package
// documentation). It is safe for
// concurrent use. The resources may live on the lock's own deployment or on
// another: rdb is where they are (a *redis.Client, a *redis.ClusterClient,
// a failover client).
type Redis struct {
	rdb       redis.Scripter
	retention time.Duration
}

// NewRedis returns a Redis guard for resources on rdb, keeping records for
// DefaultRetention after their resource is gone.
func NewRedis(rdb redis.Scripter) *Redis {
	if v := reflect.ValueOf(rdb); rdb == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		panic(argerr.New("guard.NewRedis: nil client"))
	}
	return &Redis{rdb: rdb, retention: DefaultRetention}
}

// WithRetention returns a guard like g that keeps a resource's record for
// d after the resource is gone (at least a millisecond).
func (g *Redis) WithRetention(d time.Duration) *Redis {
	if d < time.Millisecond {
		panic(argerr.New("guard retention %v: at least 1ms", d))
	}
	return &Redis{rdb: g.rdb, retention: d}
}

// Set sets key to value, with ttl as its expiry (0: none), if fence may
// write to key. The error matches ErrStaleFence when a higher fence has
// written, dlock.ErrInvalidArgument for a fence below 1, an empty or reserved
// key or a negative ttl.
func (g *Redis) Set(ctx context.Context, key string, fence int64, value any, ttl time.Duration) error {
	if ttl < 0 {
		return argerr.New("guarded Set of %q: negative TTL %v", key, ttl)
	}
	ms := int64(0)
	if ttl > 0 {
		ms = max(1, ttl.Milliseconds())
	}
	_, err := g.write(ctx, key, fence, "set", value, ms)
	return err
}

// HSet sets the hash key's fields, given as field, value pairs, if fence
// may write to key, and returns how many fields were added. Errors as for
// Set.
func (g *Redis) HSet(ctx context.Context, key string, fence int64, values ...any) (int64, error) {
	if len(values) == 0 || len(values)%2 != 0 {
		return 0, argerr.New("guarded HSet of %q: %d arguments, want field, value pairs", key, len(values))
	}
	reply, err := g.write(ctx, key, fence, "hset", values...)
	n, _ := reply.(int64)
	return n, err
}

// Del deletes key if fence may write to it. Its record stays for the
// retention, so a stale holder cannot bring the resource back. Errors as
// for Set.
func (g *Redis) Del(ctx context.Context, key string, fence int64) error {
	_, err := g.write(ctx, key, fence, "del")
	return err
}

func (g *Redis) write(ctx context.Context, key string, fence int64, op string, args ...any) (any, error) {
	if err := checkGuarded(key, fence); err != nil {
		return nil, err
	}
	argv := append([]any{fence, g.retention.Milliseconds(), op}, args...)
	reply, err := guardScript.Run(ctx, g.rdb, []string{key, recordKey(key)}, argv...).Result()
	return reply, staleError(err, key, fence)
}

// Highest returns the highest fence key has accepted, or 0 when it has no
// record.
func (g *Redis) Highest(ctx context.Context, key string) (int64, error) {
	if err := keyspace.Check(key); err != nil {
		return 0, err
	}
	n, err := g.rdb.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{recordKey(key)}).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// A Script is a caller's Lua script that a Redis guard runs only with a
// fence at least the highest the resource (its first key) has accepted,
// recording the fence in the same step. The script sees its own KEYS and
// ARGV as it would alone, and nothing of the guard's. The fence is
// recorded before the script runs, so whatever it writes is covered even
// if it fails midway or returns an error (Redis does not roll a script
// back: what it wrote before failing stands). Make one per script and
// reuse it: it is loaded into Redis once, like a go-redis Script.
type Script struct {
	s *redis.Script
}

// NewScript wraps src, a Lua script as EVAL takes it. It panics
// with an error matching dlock.ErrInvalidArgument for a script declared
// read-only (flags=no-writes): a guard records every write it lets
// through.
func NewScript(src string) *Script {
	shebang := ""
	if strings.HasPrefix(src, "#!") { // EVAL's flags line must stay first
		shebang, src, _ = strings.Cut(src, "\n")
		if strings.Contains(shebang, "no-writes") {
			panic(argerr.New("guarded script declared no-writes: a guard records the fence of every write"))
		}
		shebang += "\n"
	}
	// The caller's script first, on the first line (its line numbers are
	// its own), as a function whose parameters shadow KEYS and ARGV.
	return &Script{s: redis.NewScript(shebang + "local function guarded(KEYS, ARGV, ...) " + src + "\nend\n" + guardPreludeSrc + guardedScriptSrc)}
}

// Run runs s with keys and args if fence may write to keys[0], the
// resource (the other keys must share its hash slot on a cluster), and
// returns the script's reply. Errors as for Set; a script that fails
// returns its error as go-redis would.
func (g *Redis) Run(ctx context.Context, s *Script, fence int64, keys []string, args ...any) (any, error) {
	if s == nil {
		return nil, argerr.New("guarded script: nil *Script")
	}
	if len(keys) == 0 {
		return nil, argerr.New("guarded script: no keys (the first is the resource)")
	}
	if err := checkGuarded(keys[0], fence); err != nil {
		return nil, err
	}
	for _, k := range keys[1:] {
		if err := keyspace.Check(k); err != nil {
			return nil, err
		}
	}
	k := append(append(make([]string, 0, len(keys)+1), keys...), recordKey(keys[0]))
	a := append(append(make([]any, 0, len(args)+2), args...), fence, g.retention.Milliseconds())
	reply, err := s.s.Run(ctx, g.rdb, k, a...).Result()
	return reply, staleError(err, keys[0], fence)
}

func checkGuarded(key string, fence int64) error {
	if err := keyspace.Check(key); err != nil {
		return err
	}
	if fence < 1 {
		return argerr.New("fence %d for %q: fences start at 1 (0 is no lock's)", fence, key)
	}
	return nil
}

// recordKey is the key of the resource's record: the highest fence it has
// accepted, in the resource's hash slot.
func recordKey(resource string) string { return keyspace.Derive(recordPrefix, resource) }

// recordPrefix names the records, in dlock's reserved namespace.
const recordPrefix = keyspace.Reserved + "guard:"
