package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/owner"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/redis/go-redis/v9"
)

// read returns what the page shows of key now (History left empty).
func (v *view) read(ctx context.Context, key string) *Row {
	row := &Row{Key: key, At: time.Now().UnixMilli(), Holds: []Hold{}, Waiters: []Waiter{}}
	st, err := v.inspect(ctx, key)
	switch {
	case errors.Is(err, errNotALock):
		return row // a key of another type that matches: not a lock
	case err != nil:
		row.Error = err.Error()
		return row
	}
	if !st.isDlock() {
		return row // a value dlock did not write: a key of the user's, not shown
	}
	row.Kind, row.Held, row.Fence, row.Permits, row.Leader = st.kind, st.held, st.fence, st.permits, st.leader
	row.TTL = st.ttl
	if st.held {
		row.Holds = v.holds(ctx, st)
	}
	row.Waiters = v.waiters(ctx, key)
	return row
}

// status is what the console reads of a key, as dlock's Inspect reports
// it (Status), but read with plain read commands: a read-only Redis user
// needs no EVAL, which would let it run any script, an endless one too.
type status struct {
	key           string
	held          bool
	ttl           int64 // ms; -1: no expiry
	fence         int64
	holder, token string // holder: the token's redacted start
	waiters       int
	kind, leader  string
	permits       int
	owners        []owner.Record
}

// isDlock is Status.IsDlock: a semaphore's or read-write lock's holders,
// or a key beside which dlock keeps a fence counter or a wait queue.
func (st status) isDlock() bool {
	return st.kind == "semaphore" || st.kind == "read" || st.kind == "write" || st.fence > 0 || st.waiters > 0
}

// errNotALock is a key of a lock's type that dlock did not write.
var errNotALock = errors.New("console: not a lock")

// nodeState is one node's answer for a key.
type nodeState struct {
	value  string // the holder's token; a sorted set's first live member
	exists bool
	pttl   int64 // ms; a sorted set's longest hold's
	fence  int64
	queued int64
	owners []owner.Record
	err    error
}

// inspect reads key on every node at once and decides as Inspect does: held
// when a majority of nodes hold the same token, with the majority-th
// longest TTL of theirs; the highest fence and the longest queue of any.
func (v *view) inspect(ctx context.Context, key string) (status, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	answers := make([]nodeState, len(v.cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range v.cfg.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = readNode(ctx, n, key)
		}()
	}
	wg.Wait()
	st := status{key: key}
	answered, quorum := 0, len(answers)/2+1
	var firstErr error
	for _, a := range answers {
		switch {
		case errors.Is(a.err, errNotALock):
			return st, a.err
		case a.err != nil:
			firstErr = cmp.Or(firstErr, a.err)
			continue
		}
		answered++
		st.fence, st.waiters = max(st.fence, a.fence), max(st.waiters, int(a.queued))
	}
	for _, a := range answers {
		if a.err != nil || !a.exists {
			continue
		}
		var ttls []int64
		for _, b := range answers {
			if b.err == nil && b.exists && b.value == a.value {
				ttls = append(ttls, b.pttl)
			}
		}
		if len(ttls) < quorum {
			continue
		}
		slices.SortFunc(ttls, func(x, y int64) int { return cmp.Compare(y, x) })
		st.held, st.token, st.holder, st.ttl = true, a.value, tokens.Redact(a.value), ttls[quorum-1]
		st.kind = tokens.Primitive(a.value)
		switch st.kind {
		case "semaphore":
			n, _, _ := strings.Cut(a.value[2:], "~")
			st.permits, _ = strconv.Atoi(n)
		case "election":
			st.leader, _ = tokens.Value(a.value)
		}
		seen := map[owner.Record]bool{}
		for _, b := range answers {
			for _, r := range b.owners {
				if b.err == nil && !seen[r] && (tokens.Shared(a.value) || r.Holder == st.holder) {
					seen[r] = true
					st.owners = append(st.owners, r)
				}
			}
		}
		owner.Sort(st.owners)
		return st, nil
	}
	if answered < quorum {
		return st, fmt.Errorf("%d of %d nodes answered: %w", answered, len(answers), firstErr)
	}
	return st, nil
}

// readNode reads key's state on n in one MULTI/EXEC of read commands, as
// scripts/inspect.lua does in one script: the value or the holders, the
// TTL, the fence, the queue's length, the owner records and the time.
func readNode(ctx context.Context, n redis.UniversalClient, key string) nodeState {
	var c *redis.Client
	switch n := n.(type) {
	case *redis.ClusterClient:
		m, err := n.MasterForKey(ctx, key)
		if err != nil {
			return nodeState{err: err}
		}
		c = m
	case *redis.Client:
		c = n
	default:
		return nodeState{err: fmt.Errorf("console: a %T is not a node it can read", n)}
	}
	var get, fence *redis.StringCmd
	var holders *redis.ZSliceCmd
	var queued *redis.IntCmd
	var pttl *redis.Cmd
	var records *redis.StringSliceCmd
	var now *redis.TimeCmd
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key) // WRONGTYPE for a sorted set: its holders are read next
		holders = p.ZRangeWithScores(ctx, key, 0, -1)
		pttl = p.Do(ctx, "PTTL", key) // in ms; -1: no expiry
		fence = p.Get(ctx, keyspace.Fence(key))
		queued = p.ZCard(ctx, keyspace.Queue(key))
		records = p.HVals(ctx, keyspace.Owner(key))
		now = p.Time(ctx)
		return nil
	})
	if err := now.Err(); err != nil { // the transaction failed whole: NOPERM, a lost connection
		return nodeState{err: err}
	}
	_ = err // one command's error (WRONGTYPE, nil) is read below, with its command
	var st nodeState
	ms := now.Val().UnixMilli()
	st.fence, _ = strconv.ParseInt(fence.Val(), 10, 64)
	st.queued = queued.Val()
	values := make([]any, len(records.Val()))
	for i, r := range records.Val() {
		values[i] = r
	}
	st.owners = owner.Live(values, ms)
	switch {
	case get.Err() == nil:
		ttl, _ := pttl.Int64()
		st.value, st.exists, st.pttl = strings.TrimSuffix(get.Val(), "+"), true, ttl // "+": the holder's mark
	case holders.Err() == nil:
		zs := holders.Val()
		if len(zs) > 0 && !strings.HasPrefix(zs[0].Member.(string), "~") {
			return nodeState{err: errNotALock} // a sorted set, not dlock's
		}
		for _, z := range zs {
			if int64(z.Score) > ms {
				st.value, st.exists, st.pttl = z.Member.(string), true, int64(zs[len(zs)-1].Score)-ms
				break
			}
		}
	case !errors.Is(get.Err(), redis.Nil):
		return nodeState{err: errNotALock} // a key of another type
	}
	return st
}

// holds lists st's holders with their TTLs and owner records: a mutex's
// one, or every member of a semaphore's or read-write lock's set.
func (v *view) holds(ctx context.Context, st status) []Hold {
	owners := map[string]*Owner{}
	for _, o := range st.owners {
		owners[o.Holder] = &Owner{Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label, Since: o.Since}
	}
	if st.kind == "lock" || st.kind == "election" || st.kind == "" {
		return []Hold{{Holder: st.holder, TTL: st.ttl, Owner: owners[st.holder]}}
	}
	var out []Hold
	for _, n := range v.cfg.Nodes {
		members, now, err := zrangeAt(ctx, n, st.key)
		if err != nil {
			continue
		}
		for _, m := range members {
			h := tokens.Redact(m.Member.(string))
			out = append(out, Hold{Holder: h, TTL: int64(m.Score) - now.UnixMilli(), Owner: owners[h]})
		}
		return out
	}
	return []Hold{{Holder: st.holder, TTL: st.ttl, Owner: owners[st.holder]}}
}

// waiters lists key's queue on the node with the longest one.
func (v *view) waiters(ctx context.Context, key string) []Waiter {
	out := []Waiter{}
	for _, n := range v.cfg.Nodes {
		members, now, err := zrangeAt(ctx, n, keyspace.Queue(key))
		if err != nil || len(members) <= len(out) {
			continue
		}
		out = out[:0]
		for _, m := range members {
			id := m.Member.(string)
			waited := now.UnixMicro() - int64(m.Score) // a waiter's score: when it queued, µs
			out = append(out, Waiter{ID: id[:min(6, len(id))], Waited: max(waited/1000, 0)})
		}
	}
	return out
}

// zrangeAt reads a sorted set whole, and the server's time just after.
func zrangeAt(ctx context.Context, n redis.UniversalClient, key string) ([]redis.Z, time.Time, error) {
	var z *redis.ZSliceCmd
	var t *redis.TimeCmd
	_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		z = p.ZRangeWithScores(ctx, key, 0, -1)
		t = p.Time(ctx)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, time.Time{}, err
	}
	return z.Val(), t.Val(), nil
}

// Audit is one entry of the audit stream (dlock:audit): a revocation, or
// how it ended.
type Audit struct {
	ID     string            `json:"id"`
	At     int64             `json:"at"` // Unix milliseconds, from the entry's ID
	Fields map[string]string `json:"fields"`
}

// readAudit returns the newest entries of the first node's audit stream
// that answers (each node keeps the same entries).
func (v *view) readAudit(ctx context.Context) []Audit {
	for _, n := range v.cfg.Nodes {
		msgs, err := n.XRevRangeN(ctx, keyspace.Audit, "+", "-", 50).Result()
		if err != nil {
			continue
		}
		out := []Audit{}
		for _, m := range msgs {
			a := Audit{ID: m.ID, Fields: map[string]string{}}
			if ms, _, ok := strings.Cut(m.ID, "-"); ok {
				a.At, _ = strconv.ParseInt(ms, 10, 64)
			}
			for k, x := range m.Values {
				s, _ := x.(string)
				a.Fields[k] = s
			}
			out = append(out, a)
		}
		return out
	}
	return nil
}

// Check reports a node that does not let the console read: it scans for
// keys matching pattern ("" is "*") and their wait queues, reads a key as
// a row is read, and reads the audit stream, as the console does. Its
// error names the node (an address, never a password) and what Redis
// refused; `dlock ui` refuses to start on one. Call it before New: a
// console whose reads are refused says so on the page instead.
func Check(ctx context.Context, nodes []redis.UniversalClient, pattern string) error {
	pattern = cmp.Or(pattern, "*")
	for _, n := range nodes {
		err := eachMaster(ctx, n, func(ctx context.Context, c *redis.Client) error {
			for _, p := range []string{pattern, keyspace.QueuePrefix + "*"} {
				if err := c.ScanType(ctx, 0, p, 10, "zset").Err(); err != nil {
					return fmt.Errorf("SCAN: %w", err)
				}
			}
			if st := readNode(ctx, c, "dlock:console:check"); st.err != nil && !errors.Is(st.err, errNotALock) {
				return fmt.Errorf("reading a key: %w", st.err)
			}
			if err := c.XRevRangeN(ctx, keyspace.Audit, "+", "-", 1).Err(); err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("reading the audit stream: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
