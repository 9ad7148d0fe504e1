package dlock

import (
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// lockNames are the names dlock derives from one lock key, built once and
// reused by every script it runs; each script's KEYS are a slice of them.
type lockNames struct {
	key string
	// all: key, counter, queue, waiters, holders' fences, notify key.
	all     [6]string
	acquire [3]string // Redlock's acquire and release scripts' KEYS: lock, fence, notify
	// acquire boxed as command arguments (transport.Node.RunBoxed)
	acquireBoxed [3]any
	wake         string // the wake channel
	// line: the line scripts' KEYS (lock, fence, queue, waiters, holders'
	// fences, wake channel), and boxed (line.go)
	line      [6]string
	lineBoxed [6]any
	// fastRelease: the fast release's KEYS (lock, queue), and boxed (line_fast.go)
	fastRelease      [2]string
	fastReleaseBoxed [2]any
}

// fence is the lock key's fencing counter.
func (nm *lockNames) fence() string { return nm.all[1] }

// holders is the hash of a semaphore's or read-write lock's holders' fences.
func (nm *lockNames) holders() string { return nm.all[4] }

func namesOf(key string) *lockNames {
	nm := &lockNames{key: key, wake: keyspace.Wake(key), all: [6]string{key, keyspace.Fence(key),
		keyspace.Queue(key), keyspace.Waiters(key), keyspace.Holders(key), keyspace.Notify(key)}}
	nm.acquire = [3]string{nm.all[0], nm.all[1], nm.all[5]}
	nm.line = [6]string{nm.all[0], nm.all[1], nm.all[2], nm.all[3], nm.all[4], nm.wake}
	for i, k := range nm.line {
		nm.lineBoxed[i] = k
	}
	nm.fastRelease = [2]string{nm.line[0], nm.line[2]}
	nm.fastReleaseBoxed = [2]any{nm.lineBoxed[0], nm.lineBoxed[2]}
	for i, k := range nm.acquire {
		nm.acquireBoxed[i] = k // one allocation per key name, here, not per script
	}
	return nm
}

// namesCache remembers the names of recently used lock keys (deriving
// allocates; most programs lock the same keys), forgetting all at
// namesCacheSize keys so that ever new keys do not grow it without bound.
type namesCache struct {
	m sync.Map // lock key -> *lockNames (never modified once stored)
	n atomic.Int64
}

const namesCacheSize = 4096

func (nc *namesCache) get(key string) *lockNames {
	if nm, ok := nc.m.Load(key); ok {
		return nm.(*lockNames)
	}
	nm := namesOf(key)
	if nc.n.Add(1) > namesCacheSize {
		nc.m.Clear()
		nc.n.Store(0)
	}
	nc.m.Store(key, nm)
	return nm
}
