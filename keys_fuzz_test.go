package dlock

import (
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
)

// FuzzDerivedKeys checks, for any key, that every derived key hashes to the
// key's slot (by the Redis rule, which TestDerivedKeysShareTheLockKeysSlot
// checks against CLUSTER KEYSLOT), that derived keys of different keys
// differ, and that validation never panics.
func FuzzDerivedKeys(f *testing.F) {
	for _, k := range trickyKeys {
		f.Add(k, "a")
	}
	f.Add("{a}", "a")
	f.Add("}", "{}")
	f.Fuzz(func(t *testing.T, k1, k2 string) {
		if k1 == "" {
			return // refused before any key is derived
		}
		queue, waiters := keyspace.Queue(k1), keyspace.Waiters(k1)
		for _, d := range []string{keyspace.Fence(k1), keyspace.Wake(k1), keyspace.Notify(k1), queue, waiters} {
			if keyspace.Slot(d) != keyspace.Slot(k1) {
				t.Fatalf("derived %q of %q: slot %d, key slot %d", d, k1, keyspace.Slot(d), keyspace.Slot(k1))
			}
			if !strings.HasPrefix(d, keyspace.Reserved) {
				t.Fatalf("derived %q is outside the reserved prefix", d)
			}
		}
		if keyspace.WakePrefix+strings.TrimPrefix(keyspace.Notify(k1), keyspace.NotifyPrefix) != keyspace.Wake(k1) {
			t.Fatalf("%q: release.lua would not find the wake channel %q from the notify key %q", k1, keyspace.Wake(k1), keyspace.Notify(k1))
		}
		if k1 != k2 && keyspace.Fence(k1) == keyspace.Fence(k2) {
			t.Fatalf("%q and %q share %q", k1, k2, keyspace.Fence(k1))
		}
		var c Client
		c.nodes = []*node{{}}
		if _, err := c.prepare(k1, []Option{WithTTL(time.Duration(len(k2)) * time.Millisecond)}); err == nil {
			if k1 == "" || strings.HasPrefix(k1, keyspace.Reserved) || len(k2) < 10 {
				t.Fatalf("prepare(%q, TTL %dms) accepted bad input", k1, len(k2))
			}
		}
	})
}
