// Package doctor audits a live Redis, read-only, for the mistakes in the
// troubleshooting table that ends the Redis guidance on locks: `dlock
// doctor` prints its findings, the console shows them.
package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/eviction"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/tokens"
)

// Finding is one thing the audit found: the check, the Redis guidance's
// row (the symptom), the keys (values shortened), what is wrong, the fix,
// and how the keys were judged to be locks.
type Finding struct {
	Check string   `json:"check"` // no-expiry, huge-ttl, fixed-value, long-hold, dead-waiters, kept-fence, eviction
	Row   string   `json:"row"`   // the guidance's symptom
	Keys  []string `json:"keys"`
	What  string   `json:"what"`
	Fix   string   `json:"fix"`
	Basis string   `json:"basis"` // how the finding was decided: BasisDlock, BasisHandWritten, BasisBookkeeping, BasisConfig
}

// What a finding's keys were judged to be. A string key is audited as a
// lock only when it is one of dlock's (dlock.Status.IsDlock) or looks like
// a hand-written lock (handWritten): on a shared Redis, the other keys
// without expiry (counters, caches) are the user's data, not locks.
const (
	BasisDlock       = "dlock's locks: each has a fence counter or a wait queue of dlock's beside it (dlock.Status.IsDlock)"
	BasisHandWritten = "hand-written locks, by their look: a word of the name is lock, locks, mutex or mtx or ends in lock (mylock; not block, clock, unlock, nolock, deadlock, gridlock, padlock, airlock, sherlock and the like, nor locked), and the value is a token or owner id (one word of 16 characters or more, or with a digit), a Unix time (whole or fractional, s or ms) or a JSON object with an owner's, holder's or token's field or an expiry that is a Unix time; a flag (1, true, locked) only when a segment of the name between ':', '.' or '/' is such a word alone (lock:x, jobs:lock)"
	BasisBookkeeping = "dlock's own keys (dlock:fence:*, dlock:queue:*, dlock:waiters:*)"
	BasisConfig      = "the server's configuration (CONFIG GET maxmemory*)"
)

// The audit's limits.
const (
	hugeTTL        = time.Hour
	hugeFactor     = 10
	longHoldFactor = 10
	longHoldMin    = time.Minute
	deadAfter      = 10 * time.Second
)

// scan returns up to limit keys matching pattern, of the given type ("" any).
func scan(ctx context.Context, rdb *redis.Client, pattern, typ string, limit int) ([]string, error) {
	var keys []string
	iter := rdb.ScanType(ctx, 0, pattern, 1000, typ).Iterator()
	for iter.Next(ctx) && len(keys) < limit {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// Audit runs every check but the eviction policy on one node, read-only,
// on up to limit keys per pattern.
func Audit(ctx context.Context, rdb *redis.Client, pattern string, limit int) ([]Finding, error) {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return nil, err
	}
	keys, err := scan(ctx, rdb, pattern, "string", limit)
	if err != nil {
		return nil, err
	}
	var candidates []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "dlock:") {
			candidates = append(candidates, k)
		}
	}
	read, err := readLocks(ctx, rdb, candidates)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, g := range judge(candidates, read) {
		more := append(expiryFindings(g.keys, g.ttls), sharedValues(g.keys, g.values)...)
		for i := range more {
			more[i].Basis = g.basis
		}
		out = append(out, more...)
	}
	// dlock's own bookkeeping: fence counters, wait queues.
	for _, audit := range []struct {
		pattern, typ string
		find         func(context.Context, *redis.Client, []string, time.Time) ([]Finding, error)
	}{
		{keyspace.FencePrefix + "*", "string", fenceFindings},
		{keyspace.QueuePrefix + "*", "zset", deadWaiters},
	} {
		keys, err := scan(ctx, rdb, audit.pattern, audit.typ, limit)
		if err != nil {
			return nil, err
		}
		more, err := audit.find(ctx, rdb, keys, now)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	return out, nil
}

// keyState is what readLocks reads of a key: its TTL and value, and
// whether dlock keeps a fence counter or a wait queue beside it.
type keyState struct {
	ttl     time.Duration
	value   string
	fence   int64
	waiters int64
}

// readLocks reads the keys' TTLs, values, fence counters and queue
// lengths, pipelined a thousand keys at a time.
func readLocks(ctx context.Context, rdb *redis.Client, keys []string) ([]keyState, error) {
	out := make([]keyState, len(keys))
	for lo := 0; lo < len(keys); lo += 1000 {
		batch := keys[lo:min(len(keys), lo+1000)]
		var pttl []*redis.DurationCmd
		var get, fence []*redis.StringCmd
		var queued []*redis.IntCmd
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				pttl = append(pttl, p.PTTL(ctx, k))
				get = append(get, p.Get(ctx, k))
				fence = append(fence, p.Get(ctx, keyspace.Fence(k)))
				queued = append(queued, p.ZCard(ctx, keyspace.Queue(k)))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "WRONGTYPE") {
			return nil, err
		}
		for i := range batch {
			f, _ := strconv.ParseInt(fence[i].Val(), 10, 64)
			out[lo+i] = keyState{ttl: pttl[i].Val(), value: get[i].Val(), fence: f, waiters: queued[i].Val()}
		}
	}
	return out, nil
}

// group is keys judged alike, with their TTLs and values.
type group struct {
	basis  string
	keys   []string
	ttls   []time.Duration
	values []string
}

// judge sorts the keys into dlock's locks and hand-written ones; the rest
// are no locks, and are left alone.
func judge(keys []string, read []keyState) []group {
	groups := []group{{basis: BasisDlock}, {basis: BasisHandWritten}}
	for i, k := range keys {
		r := read[i]
		g := &groups[1]
		switch {
		case tokens.IsDlock(tokens.Primitive(r.value), r.fence, int(r.waiters)): // as dlock.Status.IsDlock
			g = &groups[0]
		case !handWritten(k, r.value):
			continue
		}
		g.keys, g.ttls, g.values = append(g.keys, k), append(g.ttls, r.ttl), append(g.values, r.value)
	}
	return groups
}

// handWritten reports whether a key that is not dlock's looks like a lock
// someone wrote by hand (SET NX, SETNX): both its name and its value must
// say so, as neither alone does (a counter "lock:attempts" holds 42; a
// cache entry holds a token-like id). The name: one of its words (split
// at punctuation, digits and camelCase) names a lock (lockWord: report_lock,
// jobLock, mylock, ORDERLOCK; not block, clock, unlock, nolock, deadlock,
// gridlock, padlock, nor locked, which is an account's or a door's state).
// The value (lockValue): a token or owner id, a Unix time, or a JSON
// object with an owner's or an expiry's field. A flag (1, true, yes,
// locked, held, taken, busy), which any setting may hold, counts only when
// a segment of the name (between ':', '.' and '/') is one word that names
// a lock: lock:x, jobs:lock, mylock:report, not settings:1:screen_lock.
func handWritten(key, value string) bool {
	if !slices.ContainsFunc(words(key), lockWord) {
		return false
	}
	switch strings.ToLower(value) {
	case "1", "true", "yes", "locked", "held", "taken", "busy":
		return slices.ContainsFunc(segments(key), func(seg string) bool {
			return !strings.ContainsFunc(seg, func(r rune) bool { return !unicode.IsLetter(r) }) && lockWord(strings.ToLower(seg))
		})
	}
	return lockValue(value)
}

// segments splits a key's name where keys' names are usually split:
// ':', '.' and '/'.
func segments(key string) []string {
	return strings.FieldsFunc(key, func(r rune) bool { return r == ':' || r == '.' || r == '/' })
}

// lockWord reports whether w, a word of a key's name in lower case, names
// a lock: lock, locks, mutex, mtx, or a word that ends in lock or locks
// (mylock, spinlocks) but none of those that end so and are no lock.
func lockWord(w string) bool {
	switch w {
	case "mutex", "mutexes", "mtx":
		return true
	}
	w = strings.TrimSuffix(w, "s")
	if !strings.HasSuffix(w, "lock") {
		return false
	}
	for _, not := range []string{"block", "clock", "unlock", "nolock", "deadlock", "gridlock", "padlock",
		"airlock", "sherlock", "hemlock", "warlock", "wedlock", "headlock", "interlock", "hillock", "bullock", "pollock"} {
		if strings.HasSuffix(w, not) {
			return false
		}
	}
	return true
}

// words splits a key's name at anything but letters, and before each
// capital that follows a small letter (jobLock: job, lock), in lower case.
func words(key string) []string {
	var out []string
	var w []rune
	prev := rune(0)
	flush := func() {
		if len(w) > 0 {
			out = append(out, strings.ToLower(string(w)))
			w = w[:0]
		}
	}
	for _, r := range key {
		switch {
		case !unicode.IsLetter(r):
			flush()
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			flush()
			w = append(w, r)
		default:
			w = append(w, r)
		}
		prev = r
	}
	flush()
	return out
}

// lockValue reports whether a value looks like what a hand-written lock
// holds, besides a flag: a token or owner id (1 to 256 printable
// characters without spaces, not a number: a random string, a UUID,
// host:pid); a Unix time in seconds or milliseconds, whole or fractional
// (the old SETNX recipe stores the expiry; Python's time.time()+ttl has a
// fraction); or a JSON object with a field whose name says owner, holder,
// token, until, expires, lease or deadline.
func lockValue(v string) bool {
	if v == "" {
		return false
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil {
		return unixTime(n)
	}
	if v[0] == '{' {
		var fields map[string]any
		if json.Unmarshal([]byte(v), &fields) != nil {
			return false
		}
		for name, value := range fields {
			name = strings.ToLower(name)
			if containsAny(name, "owner", "holder", "token", "locked_by") {
				return true
			}
			if n, ok := value.(float64); ok && unixTime(n) && containsAny(name, "until", "expir", "deadline") {
				return true // an expiry that is a time, not a duration (expiresIn: 30)
			}
		}
		return false
	}
	if len(v) > 256 || strings.ContainsAny(v[:1], `["`) {
		return false
	}
	for _, r := range v {
		if r <= ' ' || r > '~' {
			return false
		}
	}
	// A token or an owner id, not a word (on, off, open, never): random
	// and long, or with a number (host:pid, t3).
	return len(v) >= 16 || strings.ContainsAny(v, "0123456789")
}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs ...string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
}

// unixTime reports whether n reads as a Unix time between 2001 and 2100,
// in seconds or milliseconds.
func unixTime(n float64) bool {
	const from, to = 1_000_000_000, 4_102_444_800 // 2001-09-09, 2100-01-01
	return (n >= from && n < to) || (n >= from*1000 && n < to*1000)
}

// expiryFindings: lock keys without expiry, and TTLs far above the rest.
func expiryFindings(keys []string, ttls []time.Duration) []Finding {
	var none, huge []string
	var live []time.Duration
	for i, t := range ttls {
		switch {
		case t == -1:
			none = append(none, keys[i])
		case t > 0:
			live = append(live, t)
		}
	}
	var out []Finding
	if len(none) > 0 {
		out = append(out, Finding{Check: "no-expiry", Row: "a lock that never unlocks",
			Keys: none, What: fmt.Sprintf("%d lock key(s) without expiry: a holder that dies leaves them for ever", len(none)),
			Fix: "set the key and its expiry in one command (SET key token NX PX ttl; dlock always does); for these, PEXPIRE them or DEL them once their holders are known dead"})
	}
	if len(live) > 1 {
		sorted := append([]time.Duration(nil), live...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		median := sorted[len(sorted)/2]
		for i, t := range ttls {
			if t > hugeTTL && t > hugeFactor*median {
				huge = append(huge, fmt.Sprintf("%s (%v)", keys[i], t.Round(time.Second)))
			}
		}
		if len(huge) > 0 {
			out = append(out, Finding{Check: "huge-ttl", Row: "a lock that never unlocks",
				Keys: huge, What: fmt.Sprintf("TTLs over %v and %d× the median (%v): a crashed holder keeps the lock that long", hugeTTL, hugeFactor, median.Round(time.Millisecond)),
				Fix: "a TTL a little above the work's usual time, renewed while it runs (WithAutoRenew), bounded by WithMaxHold"})
		}
	}
	return out
}

// sharedValues: several lock keys holding one value.
func sharedValues(keys, values []string) []Finding {
	byValue := map[string][]string{}
	for i, v := range values {
		if v != "" {
			byValue[v] = append(byValue[v], keys[i])
		}
	}
	var vs []string
	for v, ks := range byValue {
		if len(ks) > 1 {
			vs = append(vs, v)
		}
	}
	sort.Strings(vs)
	var out []Finding
	for _, v := range vs {
		ks := byValue[v]
		sort.Strings(ks)
		out = append(out, Finding{Check: "fixed-value", Row: "occasional double entry",
			Keys: ks, What: fmt.Sprintf("%d lock keys hold the same value %s: a fixed value lets any client release any holder's lock", len(ks), shorten(v)),
			Fix: "a fresh random token per acquisition, and release only with a token check (dlock's Unlock)"})
	}
	return out
}

// fenceFindings: counters without expiry, and dlock locks held far longer
// than their TTL (fence = max(counter+1, server time in µs) at the grant).
func fenceFindings(ctx context.Context, rdb *redis.Client, fences []string, now time.Time) ([]Finding, error) {
	var kept, long []string
	for _, fk := range fences {
		ttl, err := rdb.PTTL(ctx, fk).Result()
		if err != nil {
			return nil, err
		}
		if ttl == -1 {
			kept = append(kept, fk)
		}
		lock, ok := keyspace.KeyOf(fk, keyspace.FencePrefix)
		if !ok {
			continue
		}
		lttl, err := rdb.PTTL(ctx, lock).Result()
		if err != nil || lttl <= 0 {
			continue // not held (or held without expiry: no-expiry says so)
		}
		v, err := rdb.Get(ctx, fk).Result()
		if err != nil {
			continue
		}
		fence, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		granted := time.UnixMicro(fence)
		age := now.Sub(granted)
		if granted.After(now) || age > 20*365*24*time.Hour {
			continue // the counter ran ahead of the clock: no grant time to read
		}
		if age > longHoldMin && age > longHoldFactor*lttl {
			long = append(long, fmt.Sprintf("%s (held %v, ttl %v)", lock, age.Round(time.Second), lttl.Round(time.Millisecond)))
		}
	}
	var out []Finding
	if len(long) > 0 {
		out = append(out, Finding{Check: "long-hold", Row: "renewal that never ends",
			Keys: long, What: fmt.Sprintf("lock(s) held for over %d of their TTLs and %v, renewed all along", longHoldFactor, longHoldMin), Basis: BasisBookkeeping,
			Fix: "bound the hold: WithMaxHold(d) ends renewal at d, and the holder's Context tells it; look for a stuck holder"})
	}
	if len(kept) > 0 {
		out = append(out, Finding{Check: "kept-fence", Row: "keys that outlive their locks",
			Keys: kept, What: fmt.Sprintf("%d fence counter(s) without expiry", len(kept)), Basis: BasisBookkeeping,
			Fix: "dlock keeps a counter for the TTL plus the fence margin (WithFenceMargin); PEXPIRE these to that, or let a new grant set it"})
	}
	return out, nil
}

// deadWaiters: queued waiters whose record (internal/wait: "token ttl_ms
// alive_until_ms fence keep_ms") has not been renewed for deadAfter past its end.
func deadWaiters(ctx context.Context, rdb *redis.Client, queues []string, now time.Time) ([]Finding, error) {
	var dead []string
	for _, q := range queues {
		lock, ok := keyspace.KeyOf(q, keyspace.QueuePrefix)
		if !ok {
			continue
		}
		waiters := keyspace.WaitersPrefix + strings.TrimPrefix(q, keyspace.QueuePrefix)
		ids, err := rdb.ZRange(ctx, q, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		n := 0
		for _, id := range ids {
			w, err := rdb.HGet(ctx, waiters, id).Result()
			if err != nil {
				n++ // queued without its data: nobody will claim it
				continue
			}
			f := strings.Fields(w)
			if len(f) < 3 {
				n++ // not a record the line reads: dead to it
				continue
			}
			until, _ := strconv.ParseInt(f[2], 10, 64)
			if now.Sub(time.UnixMilli(until)) > deadAfter {
				n++
			}
		}
		if n > 0 {
			dead = append(dead, fmt.Sprintf("%s (%d of %d waiters)", lock, n, len(ids)))
		}
	}
	if len(dead) == 0 {
		return nil, nil
	}
	return []Finding{{Check: "dead-waiters", Row: "waiters that never get the lock", Basis: BasisBookkeeping,
		Keys: dead, What: fmt.Sprintf("queued waiters whose client has shown no sign of life for %v (crashed processes)", deadAfter),
		Fix: "nothing to do for dlock's queue (a dead waiter is skipped when reached, and its queue expires); find out why those processes died while waiting"}}, nil
}

// eviction checks the server's eviction policy: under a memory limit,
// allkeys-* may evict any of dlock's keys, volatile-* those with a TTL,
// which all of them have (lock keys, fence counters, queues, guard
// records); noeviction refuses writes instead, which dlock reports. A
// server whose CONFIG the user may not run (an ACL, a renamed command) is
// said, in note, not to have been checked; err is for a Redis that did not
// answer.
func Eviction(ctx context.Context, rdb *redis.Client) (f *Finding, note string, err error) {
	policy, limit, err := eviction.Policy(ctx, rdb)
	var reply redis.Error
	if errors.As(err, &reply) {
		return nil, fmt.Sprintf("%s: could not check the eviction policy (CONFIG GET maxmemory*: %v); it must be noeviction, or maxmemory 0", rdb.Options().Addr, err), nil
	}
	if err != nil {
		return nil, "", err
	}
	if !eviction.Evicts(policy, limit) {
		return nil, "", nil // no limit: nothing is evicted, whatever the policy
	}
	what := "any key"
	if strings.HasPrefix(policy, "volatile-") {
		what = "keys with a TTL, which every dlock key has"
	}
	return &Finding{Check: "eviction", Row: "occasional double entry", Basis: BasisConfig,
		Keys: []string{fmt.Sprintf("%s (maxmemory %d, maxmemory-policy %s)", rdb.Options().Addr, limit, policy)},
		What: fmt.Sprintf("with memory full, %s evicts %s: an evicted lock key lets a second holder in, an evicted fence counter, wait queue or guard record breaks fencing and the wait order", policy, what),
		Fix:  "CONFIG SET maxmemory-policy noeviction, and maxmemory-policy noeviction in redis.conf (or CONFIG REWRITE) so that a restart keeps it; writes then fail when memory is full, which dlock reports, instead of dropping locks; keep locks on a Redis apart from a cache that needs eviction"}, "", nil
}

// shorten keeps the first characters of a value that may be a token.
func shorten(v string) string {
	if len(v) <= 6 {
		return strconv.Quote(v)
	}
	return strconv.Quote(v[:6] + "…")
}
