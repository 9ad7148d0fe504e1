package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redistest"
)

// plantLocks starts a server holding a dlock lock, a semaphore permit and
// a lock whose name does not say "lock", beside a plain string key that is
// no lock of dlock's; it returns the server's URL.
func plantLocks(t *testing.T) string {
	t.Helper()
	s := redistest.Start(t)
	rdb := s.Client(t)
	c := dlock.New(rdb)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := rdb.Set(ctx, "plain:lock", "some-value", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"job:lock:a", "other"} {
		if _, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Semaphore("sem:lock", 2).TryAcquire(ctx, dlock.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}
	return "redis://" + s.Addr()
}

// ls lists the keys of dlock's locks, not every string key that matches.
func TestLsListsOnlyDlocksLocks(t *testing.T) {
	u := plantLocks(t)
	code, out, stderr := run(t, "ls", "*", "--redis", u)
	if code != 0 {
		t.Fatalf("ls '*': exit %d, %q", code, stderr)
	}
	for _, k := range []string{"job:lock:a:", "other:", "sem:lock:"} {
		if !strings.Contains(out, "\n"+k) && !strings.HasPrefix(out, k) {
			t.Errorf("ls '*' does not list %s:\n%s", strings.TrimSuffix(k, ":"), out)
		}
	}
	if strings.Contains(out, "plain:lock") {
		t.Errorf("ls '*' lists a plain string key as a lock:\n%s", out)
	}
}

// ls without a PATTERN lists every lock of dlock's, whatever its name (the
// README's keys, backup or deploy, have no "lock" in them), as the console
// does; doctor audits the same keys by default.
func TestLsListsEveryLockByDefault(t *testing.T) {
	u := plantLocks(t)
	code, out, stderr := run(t, "ls", "--redis", u)
	if code != 0 {
		t.Fatalf("ls without a pattern: exit %d, %q", code, stderr)
	}
	for _, k := range []string{"job:lock:a", "sem:lock", "other"} {
		if !strings.Contains(out, k+":") {
			t.Errorf("ls without a pattern does not list %s:\n%s", k, out)
		}
	}
	if strings.Contains(out, "plain:lock") {
		t.Errorf("ls without a pattern lists a plain string key as a lock:\n%s", out)
	}
	for _, name := range []string{"ls", "doctor"} {
		if _, help, _ := run(t, name, "--help"); !strings.Contains(help, "default '*'") {
			t.Errorf("dlock %s --help does not say the default pattern is every key:\n%s", name, help)
		}
	}
}

// status names a read-write lock's kind as the docs do, "rwmutex", and
// says in mode whether it is held for reading or for writing.
func TestStatusOfARWMutexSaysItsKindAndMode(t *testing.T) {
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	ctx := context.Background()
	rk, wk := key(t)+":r", key(t)+":w"
	r, err := c.RWMutex(rk).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Unlock(ctx)
	w, err := c.RWMutex(wk).TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Unlock(ctx)
	for k, want := range map[string]struct{ mode, human string }{
		rk: {"read", "read-write lock, 1 readers"},
		wk: {"write", "read-write lock, written by"},
	} {
		out, err := dlockOn(s, "status", "--json", k).Output()
		var st statusResult
		if err != nil || json.Unmarshal(out, &st) != nil || st.Kind != "rwmutex" || st.Mode != want.mode {
			t.Errorf("status --json %s: %s %v; want kind rwmutex, mode %s", k, out, err, want.mode)
		}
		if human, _ := dlockOn(s, "status", k).Output(); !strings.Contains(string(human), want.human) {
			t.Errorf("status %s: %q, want %q", k, human, want.human)
		}
	}
}
