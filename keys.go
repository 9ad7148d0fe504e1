package dlock

import "github.com/dlock-go/dlock/internal/keyspace"

// lockNames are the names dlock derives from one lock key, built once per
// call and reused by every script it runs; each script's KEYS are a slice
// of them.
type lockNames struct {
	key string
	// all: key, counter, queue, waiters, holders' fences, notify key.
	all     [6]string
	acquire [3]string // Redlock's acquire and release scripts' KEYS: lock, fence, notify
	wake    string    // the wake channel
	// line: the line scripts' KEYS (lock, fence, queue, waiters, holders'
	// fences, wake channel) (line.go)
	line [6]string
	// fastRelease: the fast release's KEYS (lock, queue) (line_fast.go)
	fastRelease [2]string
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
	nm.fastRelease = [2]string{nm.line[0], nm.line[2]}
	return nm
}
