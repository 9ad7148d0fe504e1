package guard

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/argerr"
)

// For returns g bound to l: its writes carry l's fence, and are not sent
// once l's Context has ended (the lock is lost or released; the error is
// the Context's cause).
func (g *Redis) For(l *dlock.Lock) *LockedRedis { return &LockedRedis{g: g, l: l} }

// LockedRedis is a Redis guard bound to one Lock (Redis.For).
type LockedRedis struct {
	g *Redis
	l *dlock.Lock
}

// held reports the lock's end, if it has ended.
func (b *LockedRedis) held(key string) error { return stillHeld(b.l, strconv.Quote(key)) }

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
func stillHeld(l *dlock.Lock, resource string) error {
	if l == nil {
		return argerr.New("guarded write to %s: the guard was bound to a nil *dlock.Lock", resource)
	}
	// A Lock's Context checks the lease's deadline on the clock itself.
	if ctx := l.Context(); ctx.Err() != nil {
		return fmt.Errorf("dlock: guarded write to %s not sent: %w", resource, context.Cause(ctx))
	}
	return nil
}

// Set is Redis.Set with the lock's fence.
func (b *LockedRedis) Set(ctx context.Context, key string, value any, ttl time.Duration) error {
	if err := b.held(key); err != nil {
		return err
	}
	return b.g.Set(ctx, key, b.l.Fence(), value, ttl)
}

// HSet is Redis.HSet with the lock's fence.
func (b *LockedRedis) HSet(ctx context.Context, key string, values ...any) (int64, error) {
	if err := b.held(key); err != nil {
		return 0, err
	}
	return b.g.HSet(ctx, key, b.l.Fence(), values...)
}

// Del is Redis.Del with the lock's fence.
func (b *LockedRedis) Del(ctx context.Context, key string) error {
	if err := b.held(key); err != nil {
		return err
	}
	return b.g.Del(ctx, key, b.l.Fence())
}

// Run is Redis.Run with the lock's fence.
func (b *LockedRedis) Run(ctx context.Context, s *Script, keys []string, args ...any) (any, error) {
	resource := "a guarded script's resource"
	if len(keys) > 0 {
		resource = strconv.Quote(keys[0])
	}
	if err := stillHeld(b.l, resource); err != nil {
		return nil, err
	}
	return b.g.Run(ctx, s, b.l.Fence(), keys, args...)
}

// For returns t bound to l: its writes carry l's fence, and are not sent
// once l's Context has ended (the error is the Context's cause).
func (t SQLTable) For(l *dlock.Lock) LockedTable { return LockedTable{t: t, l: l} }

// LockedTable is an SQLTable bound to one Lock (SQLTable.For).
type LockedTable struct {
	t SQLTable
	l *dlock.Lock
}

// Update is SQLTable.Update with the lock's fence.
func (b LockedTable) Update(ctx context.Context, db SQLDB, id any, values map[string]any) error {
	if err := b.held(); err != nil {
		return err
	}
	return b.t.Update(ctx, db, b.l.Fence(), id, values)
}

// Upsert is SQLTable.Upsert with the lock's fence.
func (b LockedTable) Upsert(ctx context.Context, db SQLDB, id any, values map[string]any) error {
	if err := b.held(); err != nil {
		return err
	}
	return b.t.Upsert(ctx, db, b.l.Fence(), id, values)
}

func (b LockedTable) held() error { return stillHeld(b.l, b.t.Table) }
