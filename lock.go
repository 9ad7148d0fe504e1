package dlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"sync"
	"time"
)

// Lock is one acquisition of a lock: the key, the random token stored at it,
// and the fencing token issued with it. It is safe for concurrent use; every
// operation that changes the lock checks on the server, atomically, that the
// key still holds this token, so a Lock can never release or extend a lock
// that someone else holds.
type Lock struct {
	c     *Client
	n     *node
	key   string
	token string
	fence int64

	mu       sync.Mutex
	released bool // Unlock succeeded, or found the lock gone
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Token returns this acquisition's random owner token: the value stored at
// the key while the lock is held (160 bits from crypto/rand, URL-safe
// base64). Treat it as a secret: whoever has it can release the lock.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token issued with this acquisition: a number
// strictly greater than every fence issued before it for the same key. Pass
// it to the resource the lock protects, and have the resource refuse any
// write whose fence is lower than one it has already seen; see fence.go and
// the package documentation.
func (l *Lock) Fence() int64 { return l.fence }

// String describes the lock for logs without revealing its token.
func (l *Lock) String() string {
	return fmt.Sprintf("dlock.Lock{key=%q fence=%d token=%s}", l.key, l.fence, redact(l.token))
}

// redact keeps the first few characters of a token, enough to tell tokens
// apart in a log, not enough to use one.
func redact(token string) string {
	if len(token) <= 6 {
		return "…"
	}
	return token[:6] + "…"
}

// Unlock releases the lock if this Lock still holds it. It returns an error
// matching ErrNotHeld when the key no longer holds this Lock's token (it
// expired, and perhaps someone else holds it now; that holder's key is left
// untouched), or when the Lock was already unlocked.
//
// If ctx ends first, Unlock returns ctx's error; the release still completes
// in the background.
func (l *Lock) Unlock(ctx context.Context) error {
	if l.isReleased() {
		return l.notHeld()
	}
	ok, err := await(l.c, ctx, func(ctx context.Context) (bool, error) {
		return l.n.release(ctx, l.key, l.token)
	}, func(ok bool, err error) {
		if err == nil {
			l.setReleased()
		}
	})
	if err != nil {
		return err
	}
	l.setReleased() // released now, or found gone: either way no longer held
	if !ok {
		return l.notHeld()
	}
	return nil
}

// Extend resets the lock's time to live to ttl (MinTTL to MaxTTL), counted
// from when the server receives the request, if this Lock still holds it.
// Otherwise it returns an error matching ErrNotHeld and changes nothing: an
// expired lock is never re-created.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := checkTTL(ttl); err != nil {
		return err
	}
	if l.isReleased() {
		return l.notHeld()
	}
	ttl = ttl.Truncate(time.Millisecond)
	ok, err := await(l.c, ctx, func(ctx context.Context) (bool, error) {
		return l.n.extend(ctx, l.key, l.token, ttl)
	}, nil)
	if err != nil {
		return err
	}
	if !ok {
		return l.notHeld()
	}
	return nil
}

// TTL returns the lock's remaining time to live as the server sees it, or an
// error matching ErrNotHeld when the key no longer holds this Lock's token.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l.isReleased() {
		return 0, l.notHeld()
	}
	type answer struct {
		d  time.Duration
		ok bool
	}
	a, err := await(l.c, ctx, func(ctx context.Context) (answer, error) {
		d, ok, err := l.n.pttl(ctx, l.key, l.token)
		return answer{d, ok}, err
	}, nil)
	if err != nil {
		return 0, err
	}
	if !a.ok {
		return 0, l.notHeld()
	}
	return a.d, nil
}

func (l *Lock) notHeld() error {
	return fmt.Errorf("%w: %q", ErrNotHeld, l.key)
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

func (l *Lock) setReleased() {
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
}

// newToken returns 160 random bits from crypto/rand as URL-safe text: the
// Redis guidance asks for about 20 random bytes, unique across all clients
// and all acquisitions.
func newToken() (string, error) {
	b := make([]byte, 20)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("dlock: reading random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
