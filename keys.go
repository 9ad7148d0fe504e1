package dlock

import (
	"sync"
	"sync/atomic"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// Derived key prefixes: no braces, so they never affect slots. Names differ
// only in prefix: release.lua swaps two to get the wake channel (tested).
const (
	fencePrefix   = "dlock:fence:"   // fencing counter: the last fence issued for the key
	wakePrefix    = "dlock:wake:"    // pub/sub channel: releases and hand-offs of the key
	notifyPrefix  = "dlock:notify:"  // exists while someone waits for the wake channel's "released"
	queuePrefix   = "dlock:queue:"   // wait queue: waiter ids by the server time they queued
	waitersPrefix = "dlock:waiters:" // waiters, their groups' signs of life, the last grant (docs/design.md)
	holdersPrefix = "dlock:holders:" // the fences of a semaphore's or read-write lock's holders
	ownerPrefix   = "dlock:owner:"   // the holders' owner records (WithOwner)
)

// fenceKey returns the key of the lock key's fencing counter.
func fenceKey(key string) string { return keyspace.Derive(fencePrefix, key) }

// wakeChannel returns the channel of the lock key's releases and hand-offs.
func wakeChannel(key string) string { return keyspace.Derive(wakePrefix, key) }

// notifyKey returns the key saying someone listens (notifyWindow).
func notifyKey(key string) string { return keyspace.Derive(notifyPrefix, key) }

// queueKeys returns the lock key's wait queue and waiters' data keys.
func queueKeys(key string) (queue, waiters string) {
	return keyspace.Derive(queuePrefix, key), keyspace.Derive(waitersPrefix, key)
}

// lockNames are the names dlock derives from one lock key, built once and
// reused by every script it runs; each script's KEYS are a slice of them.
type lockNames struct {
	key string
	// all: key, counter, queue, waiters, holders' fences, notify key.
	all     [6]string
	acquire [4]string // the acquire script's KEYS: lock, fence, queue, notify
	// acquire boxed as command arguments (transport.Node.RunBoxed)
	acquireBoxed [4]any
	wake         string // the wake channel
}

// fence is the lock key's fencing counter.
func (nm *lockNames) fence() string { return nm.all[1] }

// holders is the hash of a semaphore's or read-write lock's holders' fences.
func (nm *lockNames) holders() string { return nm.all[4] }

// leanKeys are acquire_lean's KEYS, the lock key and counter, and boxed:
// each declared key costs the server on every run.
func (nm *lockNames) leanKeys() ([]string, []any) {
	return nm.acquire[:2], nm.acquireBoxed[:2]
}

// leanReleaseKeys are release_lean's KEYS: the lock key alone, and boxed.
func (nm *lockNames) leanReleaseKeys() ([]string, []any) {
	return nm.acquire[:1], nm.acquireBoxed[:1]
}

// releaseKeys are the release script's KEYS: all six.
func (nm *lockNames) releaseKeys() []string { return nm.all[:] }

// queueKeys are the KEYS of the queue's and shared holds' scripts: lock,
// fence, queue, waiters, holders.
func (nm *lockNames) queueKeys() []string { return nm.all[:5] }

func namesOf(key string) *lockNames {
	queue, waiters := queueKeys(key)
	nm := &lockNames{key: key, all: [6]string{key, fenceKey(key), queue, waiters, keyspace.Derive(holdersPrefix, key), notifyKey(key)}, wake: wakeChannel(key)}
	nm.acquire = [4]string{nm.all[0], nm.all[1], nm.all[2], nm.all[5]}
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
