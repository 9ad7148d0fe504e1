package dlock

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Every key dlock derives from a lock key must live in the lock key's Redis
// Cluster hash slot, because the scripts touch them together and a script may
// only touch keys of one slot. Redis hashes only the "hash tag" of a key when
// it has one: the text between the first '{' and the first '}' after it, if
// that text is not empty. Otherwise it hashes the whole key.
//
// A derived key is built as prefix + "{" + T + "}" [+ ":" + key], where T is
//   - the key's own hash tag, when it has one (the key is appended so that
//     locks sharing a tag still get distinct derived keys);
//   - the key itself, when it has no hash tag and contains no '}' (then
//     "{key}" hashes exactly like key; nothing is appended);
//   - otherwise (e.g. "x{}y", "}{"), a short string that is known to hash to
//     the key's slot, followed by ":" + key.
// T never contains '}', so the braces the prefix adds always form the derived
// key's tag, and the mapping from key to derived key is one-to-one: T ends at
// the first '}', and whether anything follows tells which case built it.

// reservedPrefix starts the keys and channels dlock derives from lock keys
// (see keys.go). Lock keys may not start with it, so that no lock can
// overwrite another lock's bookkeeping.
const reservedPrefix = "dlock:"

// checkKey refuses a key no lock (or guarded resource) may have: an empty
// one, or one in dlock's reserved namespace.
func checkKey(key string) error {
	if key == "" {
		return invalid("empty key")
	}
	if strings.HasPrefix(key, reservedPrefix) {
		return invalid("key %q: keys starting with %q are reserved for dlock's own bookkeeping", key, reservedPrefix)
	}
	return nil
}

// Derived key prefixes. They contain no braces, so they never affect slots.
// A key's names differ only in their prefix: release.lua derives the wake
// channel from the notify key by swapping the two (a test holds them
// together).
const (
	fencePrefix   = "dlock:fence:"   // fencing counter: the last fence issued for the key
	wakePrefix    = "dlock:wake:"    // pub/sub channel: releases and hand-offs of the key
	notifyPrefix  = "dlock:notify:"  // exists while someone waits for the wake channel's "released"
	queuePrefix   = "dlock:queue:"   // wait queue: waiter ids by the server time they queued
	waitersPrefix = "dlock:waiters:" // waiters, their groups' signs of life, the last grant (prelude.lua)
	holdersPrefix = "dlock:holders:" // the fences of a semaphore's or read-write lock's holders
	guardPrefix   = "dlock:guard:"   // a guarded resource's record: the highest fence accepted (guard.go)
)

// fenceKey returns the key of the lock key's fencing counter.
func fenceKey(key string) string { return derive(fencePrefix, key) }

// wakeChannel returns the pub/sub channel that announces the lock key's
// releases and hand-offs.
func wakeChannel(key string) string { return derive(wakePrefix, key) }

// notifyKey returns the key that tells the release script someone listens
// on the wake channel (see notifyWindow).
func notifyKey(key string) string { return derive(notifyPrefix, key) }

// queueKeys returns the keys of the lock key's wait queue: the queue and
// the waiters' data.
func queueKeys(key string) (queue, waiters string) {
	return derive(queuePrefix, key), derive(waitersPrefix, key)
}

// lockNames are the names dlock derives from one lock key, built once and
// reused by every script it runs; each script's KEYS are a slice of them.
type lockNames struct {
	key string
	// all holds the lock key, its fencing counter, wait queue, waiters,
	// holders' fences and notify key, in that order.
	all     [6]string
	acquire [4]string // the acquire script's KEYS: lock, fence, queue, notify
	// acquire boxed as command arguments (node.scriptBoxed)
	acquireBoxed [4]any
	wake         string // the wake channel
}

// fence is the lock key's fencing counter.
func (nm *lockNames) fence() string { return nm.all[1] }

// holders is the hash of a semaphore's or read-write lock's holders' fences.
func (nm *lockNames) holders() string { return nm.all[4] }

// leanKeys are the KEYS of acquire_lean, the uncontended path's acquire:
// the lock key and its fencing counter, and their boxed forms. Every
// declared key costs the server on every run (mark.lua has the
// measurement).
func (nm *lockNames) leanKeys() ([]string, []any) {
	return nm.acquire[:2], nm.acquireBoxed[:2]
}

// leanReleaseKeys are release_lean's KEYS: the lock key alone, and boxed.
func (nm *lockNames) leanReleaseKeys() ([]string, []any) {
	return nm.acquire[:1], nm.acquireBoxed[:1]
}

// releaseKeys are the release script's KEYS: all six.
func (nm *lockNames) releaseKeys() []string { return nm.all[:] }

// queueKeys are the KEYS of the scripts that work the queue (join,
// keepalive, leave) and of shared_acquire and shared_release: lock,
// fence, queue, waiters, holders.
func (nm *lockNames) queueKeys() []string { return nm.all[:5] }

func namesOf(key string) *lockNames {
	queue, waiters := queueKeys(key)
	nm := &lockNames{key: key, all: [6]string{key, fenceKey(key), queue, waiters, derive(holdersPrefix, key), notifyKey(key)}, wake: wakeChannel(key)}
	nm.acquire = [4]string{nm.all[0], nm.all[1], nm.all[2], nm.all[5]}
	for i, k := range nm.acquire {
		nm.acquireBoxed[i] = k // one allocation per key name, here, not per script
	}
	return nm
}

// namesCache remembers the names derived from recently used lock keys:
// deriving them allocates, and most programs lock the same
// keys over and over. It forgets everything once it has taken in
// namesCacheSize keys, so that a program locking ever new keys does not
// grow it without bound.
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

func derive(prefix, key string) string {
	if tag, ok := hashTag(key); ok {
		return prefix + "{" + tag + "}:" + key
	}
	if !strings.Contains(key, "}") {
		return prefix + "{" + key + "}"
	}
	return prefix + "{" + slotTag(slot(key)) + "}:" + key
}

// hashTag returns the part of key that Redis Cluster hashes, if key has a
// non-empty hash tag.
func hashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	closing := strings.IndexByte(key[open+1:], '}')
	if closing <= 0 { // no '}' after the '{', or "{}"
		return "", false
	}
	return key[open+1 : open+1+closing], true
}

// slot returns the Redis Cluster hash slot of key (0-16383), as CLUSTER
// KEYSLOT would, taking hash tags into account.
func slot(key string) int {
	if tag, ok := hashTag(key); ok {
		key = tag
	}
	return int(crc16(key) % 16384)
}

var (
	slotTagsOnce sync.Once
	slotTags     []string // slotTags[s] is a short brace-free string whose slot is s
)

// slotTag returns a short string without braces that hashes to slot s. The
// table is built once, on first use, from decimal numbers (about 150,000
// CRC16 computations, well under a millisecond's worth per slot).
func slotTag(s int) string {
	slotTagsOnce.Do(func() {
		slotTags = make([]string, 16384)
		for n, left := 0, 16384; left > 0; n++ {
			t := strconv.Itoa(n)
			if sl := crc16(t) % 16384; slotTags[sl] == "" {
				slotTags[sl] = t
				left--
			}
		}
	})
	return slotTags[s]
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster uses for key slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
