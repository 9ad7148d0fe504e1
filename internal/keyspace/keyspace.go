// Package keyspace names the keys dlock derives from a lock key (or a
// guarded resource's key), and refuses the keys no caller may use.
package keyspace

import (
	"strconv"
	"strings"
	"sync"

	"github.com/dlock-go/dlock/internal/argerr"
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

// Reserved starts the keys and channels dlock derives from lock keys
// (see Derive). Lock keys may not start with it, so that no lock can
// overwrite another lock's bookkeeping.
const Reserved = "dlock:"

// Check refuses a key no lock (or guarded resource) may have: an empty
// one, or one in dlock's reserved namespace.
func Check(key string) error {
	if key == "" {
		return argerr.New("empty key")
	}
	if strings.HasPrefix(key, Reserved) {
		return argerr.New("key %q: keys starting with %q are reserved for dlock's own bookkeeping", key, Reserved)
	}
	return nil
}

// Derive returns the key or channel named prefix for key, in key's hash
// slot (see the top of this file).
func Derive(prefix, key string) string {
	if tag, ok := HashTag(key); ok {
		return prefix + "{" + tag + "}:" + key
	}
	if !strings.Contains(key, "}") {
		return prefix + "{" + key + "}"
	}
	return prefix + "{" + slotTag(Slot(key)) + "}:" + key
}

// HashTag returns the part of key that Redis Cluster hashes, if key has a
// non-empty hash tag.
func HashTag(key string) (string, bool) {
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

// Slot returns the Redis Cluster hash slot of key (0-16383), as CLUSTER
// KEYSLOT would, taking hash tags into account.
func Slot(key string) int {
	if tag, ok := HashTag(key); ok {
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

// KeyOf returns the lock key a name derived with prefix belongs to: the
// inverse of Derive.
func KeyOf(derived, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(derived, prefix+"{")
	if !ok {
		return "", false
	}
	tag, after, ok := strings.Cut(rest, "}")
	if !ok {
		return "", false
	}
	if after == "" {
		return tag, true
	}
	return strings.CutPrefix(after, ":")
}
