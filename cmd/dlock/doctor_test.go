package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/doctor"
	"github.com/dlock-go/dlock/internal/redistest"
)

// Each mistake of the guidance's table, planted with plain commands, is
// named by doctor; a server used only through dlock has none.
func TestDoctorNamesEachPlantedMistake(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	now := time.Now()
	us := func(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }
	for _, cmd := range [][]any{
		{"SET", "lock:report", "secret-token-shared"}, // no expiry, and a fixed value...
		{"SET", "lock:export", "secret-token-shared"}, // ...shared with another lock
		{"SET", "lock:a", "t1", "EX", "10"},
		{"SET", "lock:b", "t2", "EX", "10"},
		{"SET", "lock:forever-ish", "t3", "EX", strconv.Itoa(7 * 24 * 3600)}, // a week's TTL
		{"SET", "lock:stuck", "t4", "PX", "30000"},                           // held, renewed, for an hour:
		{"SET", "dlock:fence:{lock:stuck}", us(now.Add(-time.Hour)), "PX", "60000"},
		{"SET", "dlock:fence:{lock:old}", "12345"}, // a counter kept forever
		{"ZADD", "dlock:queue:{lock:q}", "1", "w1"},
		{"HSET", "dlock:waiters:{lock:q}", "w1", "tok 1000 " + strconv.FormatInt(now.Add(-time.Minute).UnixMilli(), 10) + " 0"},
	} {
		if err := rdb.Do(ctx, cmd...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr())
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"no-expiry", "fixed-value", "huge-ttl", "long-hold", "kept-fence", "dead-waiters",
		"lock:report", "lock:forever-ish", "lock:stuck", "dlock:fence:{lock:old}", "lock:q (1 of 1 waiters)"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor did not name %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "secret-token-shared") {
		t.Errorf("doctor printed a token in full:\n%s", out)
	}
	code, out, _ = run(t, "doctor", "--redis", "redis://"+s.Addr(), "--json")
	var checks []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var f doctor.Finding
		if err := json.Unmarshal([]byte(line), &f); err != nil {
			t.Fatalf("--json line %q: %v", line, err)
		}
		checks = append(checks, f.Check)
	}
	if code != 1 || len(checks) != 6 {
		t.Fatalf("--json: exit %d, checks %v", code, checks)
	}
}

func TestDoctorFindsNothingWhereDlockIsUsed(t *testing.T) {
	s := redistest.Start(t)
	c := dlock.New(s.Client(t))
	defer c.Close()
	ctx := context.Background()
	for _, k := range []string{"lock:a", "lock:b", "lock:c"} {
		l, err := c.TryLock(ctx, k, dlock.WithTTL(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Unlock(ctx)
	}
	released, err := c.TryLock(ctx, "lock:d")
	if err != nil {
		t.Fatal(err)
	}
	released.Unlock(ctx)
	if code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr()); code != 0 || !strings.Contains(out, "no findings") {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	if code, _, _ := run(t, "doctor", "--redis", "redis://127.0.0.1:1"); code != exitRedis {
		t.Fatalf("an unreachable Redis: exit %d, want %d", code, exitRedis)
	}
	if code, _, _ := run(t, "doctor", "a", "b"); code != exitUsage {
		t.Fatalf("two patterns: exit %d, want %d", code, exitUsage)
	}
}

// An eviction policy that may evict dlock's keys (allkeys-*, volatile-*)
// under a memory limit is a finding, with the fix; noeviction, or no
// limit, is not; a user that may not read the configuration is told the
// policy could not be checked.
func TestDoctorWarnsOfAnEvictionPolicyThatDropsLocks(t *testing.T) {
	for _, tc := range []struct {
		policy, maxmemory string
		warns             bool
	}{
		{"allkeys-lru", "8mb", true},
		{"volatile-lfu", "8mb", true},
		{"noeviction", "8mb", false},
		{"allkeys-random", "0", false},
	} {
		s := redistest.Start(t, "--maxmemory", tc.maxmemory, "--maxmemory-policy", tc.policy)
		code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr())
		if !tc.warns {
			if code != 0 || !strings.Contains(out, "no findings") {
				t.Errorf("%s, maxmemory %s: exit %d, want no findings:\n%s%s", tc.policy, tc.maxmemory, code, out, errOut)
			}
			continue
		}
		if code != 1 || !strings.Contains(out, "eviction") || !strings.Contains(out, tc.policy) ||
			!strings.Contains(out, "CONFIG SET maxmemory-policy noeviction") || !strings.Contains(out, "redis.conf") {
			t.Errorf("%s, maxmemory %s: exit %d, want an eviction finding with its fix:\n%s%s", tc.policy, tc.maxmemory, code, out, errOut)
		}
	}
	s := redistest.Start(t)
	rdb := s.Client(t)
	if err := rdb.Do(context.Background(), "ACL", "SETUSER", "auditor", "on", ">auditor-pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "doctor", "--redis", "redis://auditor:auditor-pw@"+s.Addr())
	if code != 0 || !strings.Contains(out+errOut, "could not check the eviction policy") {
		t.Errorf("a user without CONFIG: exit %d, want 0 and a word that the policy was not checked:\n%s%s", code, out, errOut)
	}
}

// On a shared Redis, doctor reports dlock's locks and keys that look like
// hand-written locks (a name that says lock, a value like a token, owner
// id, expiry time or flag), never a user's plain data; each finding says
// how its keys were judged.
func TestDoctorLeavesPlainKeysAloneAndSaysHowItJudged(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	for k, v := range map[string]string{
		"counter:42":     "7",
		"counter:nolock": "12",
		"lock:attempts":  "42",
		"cache:user:1":   `{"name":"ann","locked":true}`,
		"greeting":       "hello world",
	} {
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	c := dlock.New(rdb)
	defer c.Close()
	l, err := c.TryLock(ctx, "backup", dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr()); code != 0 || !strings.Contains(out, "no findings") {
		t.Fatalf("plain keys without expiry: exit %d, want 0 and no findings:\n%s%s", code, out, errOut)
	}
	if err := rdb.Set(ctx, "report_lock", "host-a:4242", 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr(), "--json")
	var f doctor.Finding
	if code != 1 || json.Unmarshal([]byte(strings.TrimSpace(out)), &f) != nil || f.Check != "no-expiry" ||
		len(f.Keys) != 1 || f.Keys[0] != "report_lock" || !strings.Contains(f.Basis, "hand-written") {
		t.Fatalf("a hand-written lock without expiry: exit %d, want one no-expiry finding that says it looks hand-written:\n%s%s", code, out, errOut)
	}
}

// An account's or a setting's flag is no lock (user:1:locked true,
// settings:1:screen_lock 1: exit 0), and a lock whose value is a
// fractional Unix time (Python's time.time()+ttl) is one.
func TestDoctorTellsFlagsFromLocksByTheName(t *testing.T) {
	s := redistest.Start(t)
	rdb := s.Client(t)
	ctx := context.Background()
	for k, v := range map[string]string{"user:1:locked": "true", "settings:1:screen_lock": "1"} {
		if err := rdb.Set(ctx, k, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr()); code != 0 || !strings.Contains(out, "no findings") {
		t.Fatalf("flags without expiry: exit %d, want 0 and no findings:\n%s%s", code, out, errOut)
	}
	if err := rdb.SetNX(ctx, "lock:order:2", "1796608340.95", 0).Err(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "doctor", "--redis", "redis://"+s.Addr(), "--json")
	var f doctor.Finding
	if code != 1 || json.Unmarshal([]byte(strings.TrimSpace(out)), &f) != nil || f.Check != "no-expiry" ||
		len(f.Keys) != 1 || f.Keys[0] != "lock:order:2" {
		t.Fatalf("a lock holding a fractional Unix time, without expiry: exit %d, want one no-expiry finding for it:\n%s%s", code, out, errOut)
	}
}
