package dlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/dlock-go/dlock/internal/tokens"
)

// trickyKeys exercise every hash-tag rule: no braces, a tag, an empty tag,
// several tags, unbalanced braces.
var trickyKeys = []string{
	"order:1001", "x{}y", "{a}b", "a{b}c{d}", "{", "}", "}{", "{}", "{{}}", "a{{b}}c",
	"{}{a}", "a}b{c}", "x{y", "lock:{user:42}:profile", "é{ü}ß", "\x00{\xff}",
}

// Every derived key must hash to its lock key's slot, as Redis itself
// computes it, or the scripts fail with CROSSSLOT on a cluster.
func TestDerivedKeysShareTheLockKeysSlot(t *testing.T) {
	cl := redistest.StartCluster(t, 1)
	rdb := cl.Servers[0].Client(t)
	ctx := context.Background()
	keyslot := func(k string) int {
		t.Helper()
		n, err := rdb.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %q: %v", k, err)
		}
		return int(n)
	}
	for _, k := range trickyKeys {
		want := keyslot(k)
		if got := keyspace.Slot(k); got != want {
			t.Errorf("keyspace.Slot(%q) = %d, CLUSTER KEYSLOT says %d", k, got, want)
		}
		queue, waiters := keyspace.Queue(k), keyspace.Waiters(k)
		for _, d := range []string{keyspace.Fence(k), keyspace.Wake(k), keyspace.Notify(k), queue, waiters} {
			if got := keyslot(d); got != want {
				t.Errorf("derived %q of %q is in slot %d, the key in %d", d, k, got, want)
			}
		}
	}
}

func TestDerivedKeysAreDistinctForDistinctKeys(t *testing.T) {
	keys := append([]string{"a", "{a}", "{a}:{a}", "b}", "{0}:b}"}, trickyKeys...)
	seen := map[string]string{}
	for _, k := range keys {
		d := keyspace.Waiters(k)
		if other, dup := seen[d]; dup {
			t.Errorf("%q and %q share the derived key %q", k, other, d)
		}
		seen[d] = k
	}
}

// A release that hands the key to a waiter names it on the key's wake
// channel, whatever the key's form, on a server and on a cluster (SPUBLISH
// in the key's slot).
func TestReleaseNotifiesWatchers(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	s := redistest.Start(t)
	cl := redistest.StartCluster(t, 3)
	for name, c := range map[string]*Client{
		"standalone": New(s.Client(t)),
		"cluster":    New(cl.Client(t)),
	} {
		t.Run(name, func(t *testing.T) {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			// Twice per key: a channel watched again after its last waiter
			// left is subscribed again (the changes are sent in order).
			for _, k := range []string{"order:1", "order:1", "{a}b", "x{}y", "x{}y"} {
				l, err := c.TryLock(ctx, k, WithTTL(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				n, nm := c.nodes[0], namesOf(k)
				if g, err := n.acquireLine(ctx, nm, "waiter", "w1", options{ttl: time.Minute}); err != nil || g.ok {
					t.Fatal(g, err)
				}
				w, ready := n.Watch(keyspace.Wake(k))
				wake := w.C
				select { // the confirmation itself, not a timer
				case <-ready:
				case <-ctx.Done():
					t.Fatal("subscription not confirmed")
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				select {
				case p := <-wake:
					if f, ok := wakeFor("w1", p); !ok || f <= l.Fence() {
						t.Fatalf("%q: message %q, want w1 and a fence above %d", k, p, l.Fence())
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("%q: no notification after Unlock", k)
				}
				w.Cancel()
				if ok, err := n.releaseLine(ctx, nm, "waiter", "w1", time.Minute); err != nil || !ok {
					t.Fatal(ok, err)
				}
			}
		})
	}
}

// A waiter that gives up after a hand-off granted it the lock passes the lock
// on to the next waiter instead of keeping it.
func TestLeavingAfterAGrantPassesTheLockOn(t *testing.T) {
	const k = "lock:leave"
	s := redistest.Start(t)
	rdb := s.Client(t)
	c := New(rdb)
	defer c.Close()
	ctx := context.Background()
	l, err := c.TryLock(ctx, k, WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	n, nm := c.nodes[0], namesOf(k)
	for i, id := range []string{"first", "second"} {
		if g, err := n.acquireLine(ctx, nm, "tok-"+id, id, options{ttl: time.Minute}); err != nil || g.ok {
			t.Fatalf("waiter %d: %+v %v", i, g, err)
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rdb.Get(ctx, k).Val(); got != "tok-first" {
		t.Fatalf("after release the key holds %q, want the first waiter's token", got)
	}
	if ok, err := n.releaseLine(ctx, nm, "tok-first", "first", time.Minute); err != nil || !ok {
		t.Fatalf("leave = %v, %v; want it to report the grant", ok, err)
	}
	if got := rdb.Get(ctx, k).Val(); got != "tok-second" {
		t.Fatalf("after the first waiter left, the key holds %q, want the second's token", got)
	}
}

// release.lua derives a key's wake channel from its notify key, replacing
// one prefix with the other: check that this is the channel keys.go names,
// for every kind of key.
func TestReleaseScriptDerivesTheWakeChannel(t *testing.T) {
	want := fmt.Sprintf("'%s' .. string.sub(KEYS[3], %d)", keyspace.WakePrefix, len(keyspace.NotifyPrefix)+1)
	if !strings.Contains(releaseSrc, want) {
		t.Fatalf("release.lua does not derive the channel as %s", want)
	}
	for _, k := range append([]string{"a", "{a}", "{a}:{a}"}, trickyKeys...) {
		nm := namesOf(k)
		if got := keyspace.WakePrefix + strings.TrimPrefix(nm.acquire[2], keyspace.NotifyPrefix); got != nm.wake {
			t.Errorf("key %q: channel from the notify key %q, keys.go names %q", k, got, nm.wake)
		}
	}
}

// Every token carries the protocol's version; a token of another version is
// told apart.
func TestTokensCarryTheProtocolVersion(t *testing.T) {
	for _, o := range []options{{}, {kind: "~s3~"}, {kind: tokens.Read}, {candidate: true, value: "host"}} {
		tok, err := tokens.New(o.kind, o.value, o.candidate)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := tokens.VersionOf(tok); !ok || v != tokens.Version || otherVersion(tok) != nil {
			t.Errorf("token %q: version %d %v", tok, v, ok)
		}
	}
	old := strings.Repeat("a", 27) + "-v2"
	if err := otherVersion(old); !errors.Is(err, ErrProtocol) {
		t.Errorf("a v2 token: %v", err)
	}
	for _, notOurs := range []string{"by-hand", strings.Repeat("a", 27), ""} {
		if _, ok := tokens.VersionOf(notOurs); ok || otherVersion(notOurs) != nil {
			t.Errorf("%q read as a dlock token", notOurs)
		}
	}
}
