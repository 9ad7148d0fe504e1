package dlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/dlock-go/dlock/internal/transport"
)

// Semaphores and read-write locks: one key, several holders, on Lock's
// queue, hand-off, leases and fence counter; every grant is a *Lock. Its
// kind travels in its token ("~s<permits>~", "~r~", "~w~"), which the
// scripts read to decide what fits; the key is a sorted set of holders
// (docs/design.md). The first waiter that does not fit stops every hand-off
// behind it, so readers cannot starve a writer. One deployment only: on
// Redlock, "fewer than N" per node is not fewer than N in all.

// ErrPermitMismatch is returned when a Semaphore is asked for with other
// permits than its holders were granted with: two limits on one key would
// be none. The holders' permits follow in parentheses; nothing is changed.
// Like ErrWrongKind it is a usage error, never a *NodeError.
var ErrPermitMismatch = errors.New("dlock: the semaphore's holders have other permits")

// kindError returns the usage error a script's error reply stands for
// (ErrWrongKind or ErrPermitMismatch, without the reply's script sha and
// Lua line), or nil for any other error.
func kindError(err error) error {
	if !transport.IsRedisError(err) {
		return nil
	}
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "WRONGTYPE"):
		return ErrWrongKind
	case strings.HasPrefix(msg, "DLOCKPERMITS "):
		if f := strings.Fields(msg); len(f) > 1 {
			return fmt.Errorf("%w (%s)", ErrPermitMismatch, f[1])
		}
		return ErrPermitMismatch
	}
	return nil
}

// Semaphore is a counting semaphore: at most permits holders of its key at
// once.
type Semaphore struct {
	c       *Client
	key     string
	permits int
}

// Semaphore returns the semaphore on key with permits permits. A permits
// below 1 is refused by Acquire and TryAcquire (ErrInvalidArgument), and
// one other than the current holders' by ErrPermitMismatch.
func (c *Client) Semaphore(key string, permits int) *Semaphore {
	return &Semaphore{c: c, key: key, permits: permits}
}

// Acquire waits for a permit, in arrival order, until ctx ends (an error
// matching ErrNotObtained and ctx.Err()). The permit is a *Lock: it expires
// with its TTL unless renewed, its Fence is above every earlier grant's on
// the key, its Context ends when it is lost, and Unlock gives it back.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	needContext(ctx)
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.c.Lock(ctx, s.key, s.with(opts)...)
}

// TryAcquire makes one attempt to get a permit: ErrNotObtained when all
// are held (or others are queued for them).
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	needContext(ctx)
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.c.TryLock(ctx, s.key, s.with(opts)...)
}

func (s *Semaphore) check() error {
	if s.permits < 1 {
		return invalid("semaphore %q with %d permits: want at least 1", s.key, s.permits)
	}
	return s.c.oneDeployment("Semaphore")
}

func (s *Semaphore) with(opts []Option) []Option {
	return append(opts, holdKind("~s"+strconv.Itoa(s.permits)+"~"))
}

// RWMutex is a read-write lock: many readers or one writer. Readers that
// come after a waiting writer wait behind it.
type RWMutex struct {
	c   *Client
	key string
}

// RWMutex returns the read-write lock on key.
func (c *Client) RWMutex(key string) *RWMutex { return &RWMutex{c: c, key: key} }

// Lock waits for the write hold (nobody else holds the key), in arrival
// order. The hold is a *Lock whose Fence is above every earlier grant's,
// read holds included, so a resource can refuse a stale writer or reader.
func (m *RWMutex) Lock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.take(ctx, tokens.Write, true, opts)
}

// TryLock makes one attempt at the write hold.
func (m *RWMutex) TryLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.take(ctx, tokens.Write, false, opts)
}

// RLock waits for a read hold: shared with other readers, not with a
// writer, and behind any writer that waits.
func (m *RWMutex) RLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.take(ctx, tokens.Read, true, opts)
}

// TryRLock makes one attempt at a read hold.
func (m *RWMutex) TryRLock(ctx context.Context, opts ...Option) (*Lock, error) {
	return m.take(ctx, tokens.Read, false, opts)
}

func (m *RWMutex) take(ctx context.Context, prefix string, wait bool, opts []Option) (*Lock, error) {
	if err := m.c.oneDeployment("RWMutex"); err != nil {
		return nil, err
	}
	opts = append(opts, holdKind(prefix))
	if wait {
		return m.c.Lock(ctx, m.key, opts...)
	}
	return m.c.TryLock(ctx, m.key, opts...)
}

// holdKind makes the acquisition a shared hold of the kind prefix names.
func holdKind(prefix string) Option { return func(o *options) { o.kind = prefix } }

// oneDeployment refuses what needs a single deployment on a Redlock Client.
func (c *Client) oneDeployment(what string) error {
	if len(c.nodes) > 1 {
		return fmt.Errorf("dlock: %s needs one Redis deployment, not Redlock over %d nodes: %w", what, len(c.nodes), errors.ErrUnsupported)
	}
	return nil
}
