package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/redis/go-redis/v9"
)

// read returns what the page shows of key now (History left empty).
func (v *view) read(ctx context.Context, key string) *Row {
	row := &Row{Key: key, At: time.Now().UnixMilli(), Holds: []Hold{}, Waiters: []Waiter{}}
	st, err := v.cfg.Locks.Inspect(ctx, key)
	switch {
	case errors.Is(err, dlock.ErrWrongKind) || (err != nil && strings.Contains(err.Error(), "WRONGTYPE")):
		return row // a key of another type that matches: not a lock
	case err != nil && !errors.Is(err, dlock.ErrProtocol):
		row.Error = err.Error()
		return row
	}
	if !st.IsDlock() {
		return row // a value dlock did not write: a key of the user's, not shown
	}
	row.Kind, row.Mode, row.Held, row.Fence, row.Permits, row.Leader = st.Kind, st.Mode, st.Held, st.Fence, st.Permits, st.Leader
	row.TTL = st.TTL.Milliseconds()
	if st.Held {
		row.Holds = v.holds(ctx, st)
	}
	row.Waiters = v.waiters(ctx, key)
	return row
}

// holds lists st's holders with their TTLs and owner records: a mutex's
// one, or every member of a semaphore's or read-write lock's set.
func (v *view) holds(ctx context.Context, st dlock.Status) []Hold {
	owners := map[string]*Owner{}
	for _, o := range st.Owners {
		owners[o.Holder] = &Owner{Host: o.Host, PID: o.PID, Program: o.Program, Label: o.Label, Since: o.Since.UnixMilli()}
	}
	if st.Kind == "lock" || st.Kind == "election" || st.Kind == "" {
		return []Hold{{Holder: st.Holder, TTL: st.TTL.Milliseconds(), Owner: owners[st.Holder]}}
	}
	var out []Hold
	for _, n := range v.cfg.Nodes {
		members, now, err := zrangeAt(ctx, n, st.Key)
		if err != nil {
			continue
		}
		for _, m := range members {
			h := tokens.Redact(m.Member.(string))
			out = append(out, Hold{Holder: h, TTL: int64(m.Score) - now.UnixMilli(), Owner: owners[h]})
		}
		return out
	}
	return []Hold{{Holder: st.Holder, TTL: st.TTL.Milliseconds(), Owner: owners[st.Holder]}}
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
			locks := dlock.New(dlock.Direct(c))
			defer locks.Close()
			if _, err := locks.Inspect(ctx, "dlock-console-check"); err != nil {
				return fmt.Errorf("reading a key: %w", err)
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
