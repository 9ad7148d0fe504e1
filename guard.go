package dlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The resource side of fencing
//
// A fence only protects what refuses a stale one. A Guard keeps, beside a
// resource in Redis, the highest fence any guarded write to it was
// accepted with, and lets a write through only if its fence is at least
// that: the check, the write and the new record are one script, so no
// other write comes between them (a check and a write sent apart are the
// classic mistake: a stale holder passes the check, pauses, then writes).
// "At least" lets a holder write more than once under one grant. Fences
// are compared as numbers, exactly, for every int64 (guard_prelude.lua).
//
// One resource, one lock: fences are numbered per lock key, so a resource
// written under the fences of two different locks compares unrelated
// numbers, and the lower lock's writes are refused for as long as the
// other's record stands. Guard each resource by one lock (or one
// election, or the write holds of one RWMutex). Semaphore permits and read
// holds are shared by design: writes under them refuse each other.
//
// Lifetime. The record (dlock:guard:{…}, in the resource's hash slot)
// lives as long as the resource does and a retention after it, as the
// resource stood at the last guarded write: without expiry while the
// resource has none; until the resource's expiry plus the retention while
// it has one; for the retention once it is gone (after a guarded Del, or
// when it expired). An unguarded command that changes the resource's
// expiry (PERSIST, EXPIRE) does not move the record's: one more reason to
// send every write through the guard. A holder whose write arrives after
// the resource and its record are both gone is let in: it must have been
// stale for longer than the retention (default an hour; WithRetention).
// Data loss on the resource's Redis (a restart without persistence, a
// failover to a replica that missed the record) loses the record with the
// data it guarded; the fences themselves keep growing (fence.go).

// DefaultRetention is how long a Guard keeps a resource's record after the
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

// ErrStaleFence is matched by the error of a guarded write that was
// refused because the resource has accepted a write with a higher fence:
// the writer's lock was lost, and someone has held it since. Nothing was
// written. Its *StaleFenceError tells the fences.
var ErrStaleFence = errors.New("dlock: stale fence")

// StaleFenceError is a guarded write refused for its fence.
type StaleFenceError struct {
	Resource string // the resource's key (Redis) or table and row (SQL)
	Fence    int64  // the refused write's fence
	Highest  int64  // the highest fence the resource had accepted
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("dlock: stale fence: %s refused fence %d, below the %d it has accepted", e.Resource, e.Fence, e.Highest)
}

// Is makes the error match ErrStaleFence.
func (e *StaleFenceError) Is(target error) bool { return target == ErrStaleFence }

// Guard writes to Redis resources only with fences at least the highest
// each resource has accepted (see the top of guard.go). It is safe for
// concurrent use. The resources may live on the lock's own deployment or on
// another: rdb is where they are (a *redis.Client, a *redis.ClusterClient,
// a failover client).
type Guard struct {
	rdb       redis.Scripter
	retention time.Duration
}

// NewGuard returns a Guard for resources on rdb, keeping records for
// DefaultRetention after their resource is gone.
func NewGuard(rdb redis.Scripter) *Guard {
	if rdb == nil {
		panic(invalid("NewGuard: nil client"))
	}
	return &Guard{rdb: rdb, retention: DefaultRetention}
}

// WithRetention returns a Guard like g that keeps a resource's record for
// d after the resource is gone (at least a millisecond).
func (g *Guard) WithRetention(d time.Duration) *Guard {
	if d < time.Millisecond {
		panic(invalid("guard retention %v: at least 1ms", d))
	}
	return &Guard{rdb: g.rdb, retention: d}
}

// Set sets key to value, with ttl as its expiry (0: none), if fence may
// write to key. The error matches ErrStaleFence when a higher fence has
// written, ErrInvalidArgument for a fence below 1, an empty or reserved
// key or a negative ttl.
func (g *Guard) Set(ctx context.Context, key string, fence int64, value any, ttl time.Duration) error {
	if ttl < 0 {
		return invalid("guarded Set of %q: negative TTL %v", key, ttl)
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
func (g *Guard) HSet(ctx context.Context, key string, fence int64, values ...any) (int64, error) {
	if len(values) == 0 || len(values)%2 != 0 {
		return 0, invalid("guarded HSet of %q: %d arguments, want field, value pairs", key, len(values))
	}
	reply, err := g.write(ctx, key, fence, "hset", values...)
	n, _ := reply.(int64)
	return n, err
}

// Del deletes key if fence may write to it. Its record stays for the
// retention, so a stale holder cannot bring the resource back. Errors as
// for Set.
func (g *Guard) Del(ctx context.Context, key string, fence int64) error {
	_, err := g.write(ctx, key, fence, "del")
	return err
}

func (g *Guard) write(ctx context.Context, key string, fence int64, op string, args ...any) (any, error) {
	if err := checkGuarded(key, fence); err != nil {
		return nil, err
	}
	argv := append([]any{fence, g.retention.Milliseconds(), op}, args...)
	reply, err := guardScript.Run(ctx, g.rdb, []string{key, derive(guardPrefix, key)}, argv...).Result()
	return reply, staleError(err, key, fence)
}

// Highest returns the highest fence key has accepted, or 0 when it has no
// record.
func (g *Guard) Highest(ctx context.Context, key string) (int64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	n, err := g.rdb.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{derive(guardPrefix, key)}).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// A GuardedScript is a caller's Lua script that a Guard runs only with a
// fence at least the highest the resource (its first key) has accepted,
// recording the fence in the same step. The script sees its own KEYS and
// ARGV as it would alone, and nothing of the guard's. The fence is
// recorded before the script runs, so whatever it writes is covered even
// if it fails midway or returns an error (Redis does not roll a script
// back: what it wrote before failing stands). Make one per script and
// reuse it: it is loaded into Redis once, like a go-redis Script.
type GuardedScript struct {
	s *redis.Script
}

// NewGuardedScript wraps src, a Lua script as EVAL takes it. It panics
// with an error matching ErrInvalidArgument for a script declared
// read-only (flags=no-writes): a guard records every write it lets
// through.
func NewGuardedScript(src string) *GuardedScript {
	shebang := ""
	if strings.HasPrefix(src, "#!") { // EVAL's flags line must stay first
		shebang, src, _ = strings.Cut(src, "\n")
		if strings.Contains(shebang, "no-writes") {
			panic(invalid("guarded script declared no-writes: a guard records the fence of every write"))
		}
		shebang += "\n"
	}
	// The caller's script first, on the first line (its line numbers are
	// its own), as a function whose parameters shadow KEYS and ARGV.
	return &GuardedScript{s: redis.NewScript(shebang + "local function guarded(KEYS, ARGV, ...) " + src + "\nend\n" + guardPreludeSrc + guardedScriptSrc)}
}

// Run runs s with keys and args if fence may write to keys[0], the
// resource (the other keys must share its hash slot on a cluster), and
// returns the script's reply. Errors as for Set; a script that fails
// returns its error as go-redis would.
func (g *Guard) Run(ctx context.Context, s *GuardedScript, fence int64, keys []string, args ...any) (any, error) {
	if s == nil {
		return nil, invalid("guarded script: nil *GuardedScript")
	}
	if len(keys) == 0 {
		return nil, invalid("guarded script: no keys (the first is the resource)")
	}
	if err := checkGuarded(keys[0], fence); err != nil {
		return nil, err
	}
	for _, k := range keys[1:] {
		if err := checkKey(k); err != nil {
			return nil, err
		}
	}
	k := append(append(make([]string, 0, len(keys)+1), keys...), derive(guardPrefix, keys[0]))
	a := append(append(make([]any, 0, len(args)+2), args...), fence, g.retention.Milliseconds())
	reply, err := s.s.Run(ctx, g.rdb, k, a...).Result()
	return reply, staleError(err, keys[0], fence)
}

func checkGuarded(key string, fence int64) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if fence < 1 {
		return invalid("fence %d for %q: fences start at 1 (0 is no lock's)", fence, key)
	}
	return nil
}

// staleError turns the scripts' refusal into a *StaleFenceError.
func staleError(err error, resource string, fence int64) error {
	if err == nil || !isRedisError(err) {
		return err
	}
	seen, ok := strings.CutPrefix(err.Error(), "DLOCKSTALE ")
	if !ok {
		return err
	}
	highest, _ := strconv.ParseInt(seen, 10, 64)
	return &StaleFenceError{Resource: resource, Fence: fence, Highest: highest}
}

// For returns g bound to l: its writes carry l's fence, and are not sent
// once l's Context has ended (the lock is lost or released; the error is
// the Context's cause).
func (g *Guard) For(l *Lock) *LockGuard { return &LockGuard{g: g, l: l} }

// LockGuard is a Guard bound to one Lock (Guard.For).
type LockGuard struct {
	g *Guard
	l *Lock
}

// held reports the lock's end, if it has ended.
func (b *LockGuard) held(key string) error { return stillHeld(b.l, strconv.Quote(key)) }

// stillHeld returns, once l's lease has ended, the error of a write to
// resource that is not sent: a holder that has been told its lock is gone,
// or whose lease has run out on its own clock (its timer may not have
// fired yet), does not write.
//
// What remains is the window between this check and the write reaching
// the resource: a process paused there (a GC pause, SIGSTOP, a VM
// migration) sends its write after its lease ended. The resource's fence
// check refuses it once the next holder has written with its higher fence;
// before that, nothing can tell the stale write apart. Keep the work
// between taking the lock and writing short, and use a TTL well above the
// pauses the process may see.
func stillHeld(l *Lock, resource string) error {
	if l == nil {
		return invalid("guarded write to %s: the guard was bound to a nil *Lock", resource)
	}
	if l.lease.over() {
		return fmt.Errorf("dlock: guarded write to %s not sent: %w", resource, l.lease.ended())
	}
	return nil
}

// Set is Guard.Set with the lock's fence.
func (b *LockGuard) Set(ctx context.Context, key string, value any, ttl time.Duration) error {
	if err := b.held(key); err != nil {
		return err
	}
	return b.g.Set(ctx, key, b.l.Fence(), value, ttl)
}

// HSet is Guard.HSet with the lock's fence.
func (b *LockGuard) HSet(ctx context.Context, key string, values ...any) (int64, error) {
	if err := b.held(key); err != nil {
		return 0, err
	}
	return b.g.HSet(ctx, key, b.l.Fence(), values...)
}

// Del is Guard.Del with the lock's fence.
func (b *LockGuard) Del(ctx context.Context, key string) error {
	if err := b.held(key); err != nil {
		return err
	}
	return b.g.Del(ctx, key, b.l.Fence())
}

// Run is Guard.Run with the lock's fence.
func (b *LockGuard) Run(ctx context.Context, s *GuardedScript, keys []string, args ...any) (any, error) {
	if len(keys) > 0 {
		if err := b.held(keys[0]); err != nil {
			return nil, err
		}
	}
	return b.g.Run(ctx, s, b.l.Fence(), keys, args...)
}
