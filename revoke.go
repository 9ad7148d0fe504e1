package dlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/quorum"
	"github.com/dlock-go/dlock/internal/tokens"
	"github.com/redis/go-redis/v9"
)

// Revocation says which holds of a key Revoke takes back, who asks and why.
type Revocation struct {
	// Holder is the hold to revoke as Status.Holder or Owner.Holder show it
	// (a token's redacted start); "" revokes every hold of the key.
	Holder string
	By     string // who revokes (at most 512 bytes): recorded in the audit stream
	Reason string // why (at most 512 bytes): recorded, and part of the holder's cause
	// Grace is how long the holders have to let go before their holds are
	// removed; 0 means the key's remaining TTL. At most MaxGrace.
	Grace time.Duration
}

// MaxGrace is the longest Revocation.Grace accepted (MaxTTL): a longer one
// is a unit mistake, and would overflow the marks' expiry.
const MaxGrace = MaxTTL

// revokeNodeTimeout bounds each node's part of every step of a Revoke on
// several nodes, its reads of the key's state included (revokeTimeout), so
// that a paused node costs each step at most this, whatever the go-redis
// client's read timeout and retries; not the node timeout, which would
// fail a Revoke on a loaded machine's stall of tens of milliseconds. On
// one node the context bounds it.
const revokeNodeTimeout = time.Second

// revokeTimeout is revokeNodeTimeout on several nodes, else none.
func (c *Client) revokeTimeout() time.Duration {
	if len(c.nodes) > 1 {
		return revokeNodeTimeout
	}
	return 0
}

// Revoked is what Revoke did.
type Revoked struct {
	Holds   []string // the holds revoked, redacted
	Removed int      // how many had not let go when the grace ended, and were removed
	Fence   int64    // the key's fence counter afterwards: every later holder's fence is above every revoked hold's
}

// Revoke takes back the holds of key that r names, cooperatively:
//
//  1. Each hold is marked revoked on every node, and an entry "revoke" is
//     added to each node's audit stream (dlock:audit): key, hold, fence,
//     owner record, by, reason, grace; the stream's IDs say when.
//  2. A marked hold is never renewed again: the holder's next renewal (its
//     watchdog's, or Extend) is refused, its Context ends with a cause
//     matching ErrRevoked, and it gives the key back.
//  3. When every hold has let go or the grace has ended, the holds still
//     there are removed as Unlock removes them (the next waiter is served;
//     on Redlock's nodes a removed lock's fence counter is raised above its
//     fence), and an entry "ended" records whether each hold let go or was
//     removed. Every
//     later holder's fence is above every revoked hold's, so its writes
//     make every guard refuse the revoked holder's from then on.
//
// Revoke returns when that is done, or when ctx ends or the Client is
// closed (the marks stand: the holds end with their leases; the error is
// ctx's, or ErrClosed). Close waits for it to return. It fails with an error matching ErrNotHeld
// when key has no live hold of dlock's that r names: a key dlock did not
// write is never touched, and a string that only looks like a token is
// taken for the user's unless it has a TTL or dlock's fence counter beside
// it (every mutex dlock grants has both). The console (module dlock/console)
// calls it.
func (c *Client) Revoke(ctx context.Context, key string, r Revocation) (Revoked, error) {
	needContext(ctx)
	o, err := c.prepare(key, nil)
	if err != nil {
		return Revoked{}, err
	}
	if err := r.check(); err != nil {
		return Revoked{}, err
	}
	if !c.begin() {
		return Revoked{}, ErrClosed
	}
	defer c.end()
	ctx, unbind := c.bind(ctx)
	defer unbind()
	out, err := c.revoke(ctx, key, r, o.fenceKeep())
	if err != nil && ctx.Err() != nil { // the step it ended in failed for that: say why
		err = context.Cause(ctx) // ErrClosed, or ctx's error
	}
	return out, err
}

// check refuses a Revocation out of bounds.
func (r Revocation) check() error {
	if r.Grace < 0 || r.Grace > MaxGrace || len(r.By) > 512 || len(r.Reason) > 512 {
		return invalid("revoke: Grace %v outside 0 to %v, or By or Reason over 512 bytes", r.Grace, MaxGrace)
	}
	return nil
}

// revoke is Revoke's steps, on a context that Close ends; keep is how long
// a removed lock's fence counter is kept.
func (c *Client) revoke(ctx context.Context, key string, r Revocation, keep time.Duration) (Revoked, error) {
	answers := c.inspectAll(ctx, key, "", c.revokeTimeout(), "revoke")
	st, err := statusOf(ctx, key, answers)
	switch {
	case errors.Is(err, ErrWrongKind):
		return Revoked{}, fmt.Errorf("%w: %q holds no lock of dlock's (%w)", ErrNotHeld, key, err)
	case err != nil && !errors.Is(err, ErrProtocol):
		return Revoked{}, err
	}
	nm := namesOf(key)
	toks, err := holdsOf(answers, r.Holder)
	// A token-shaped value with neither the TTL nor the fence counter that
	// every mutex dlock grants has (IsDlock) is the user's: never touched.
	// One that lost its counter (evicted, deleted) still has its TTL.
	if err != nil || len(toks) == 0 || !st.IsDlock() && st.TTL <= 0 {
		return Revoked{}, errors.Join(err, fmt.Errorf("%w: %q has no hold %q to revoke", ErrNotHeld, key, r.Holder))
	}
	if r.Grace == 0 {
		r.Grace = max(st.TTL, 0)
	}
	if err := c.markRevoked(ctx, nm, toks, st, r); err != nil {
		return Revoked{}, err
	}
	c.awaitLetGo(ctx, nm, toks, r.Grace)
	out := Revoked{Fence: st.Fence}
	for _, t := range toks {
		out.Holds = append(out.Holds, tokens.Redact(t))
	}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	return c.removeRevoked(ctx, nm, toks, st, r, keep, out), nil
}

// removeRevoked removes what is left of toks' holds once their grace is
// over, records how each ended, and completes out: how many were removed,
// and the fence counter afterwards.
func (c *Client) removeRevoked(ctx context.Context, nm *lockNames, toks []string, st Status, r Revocation, keep time.Duration, out Revoked) Revoked {
	for _, t := range toks {
		how := "let go"
		if c.removeHold(ctx, nm, t, st.Fence+1, keep) {
			how, out.Removed = "removed", out.Removed+1
		}
		c.audit(ctx, nm.key, t, st, r, "ended", "how", how)
	}
	if after, err := c.status(ctx, nm.key, c.revokeTimeout()); err == nil || errors.Is(err, ErrProtocol) {
		out.Fence = max(out.Fence, after.Fence)
	}
	return out
}

// holdsOf returns the live holds of dlock's in answers, on any node that
// answered, that match holder (redacted; "" for all). A value dlock did
// not write is no hold: Revoke never deletes a key of the user's.
func holdsOf(answers []answer[keyState], holder string) ([]string, error) {
	var toks []string
	var errs []error
	for _, a := range answers {
		errs = append(errs, a.Err)
		for _, t := range a.V.holds {
			_, ours := tokens.VersionOf(t)
			if ours && !slices.Contains(toks, t) && (holder == "" || tokens.Redact(t) == holder) {
				toks = append(toks, t)
			}
		}
	}
	if len(toks) == 0 {
		return nil, errors.Join(errs...)
	}
	return toks, nil
}

// markRevoked marks toks revoked on every node (for a minute past the
// grace, and at least past st's TTL: no renewal can pass while a hold
// lasts) and records it; it fails unless a majority of nodes took the marks.
func (c *Client) markRevoked(ctx context.Context, nm *lockNames, toks []string, st Status, r Revocation) error {
	why := "by " + r.By
	if r.Reason != "" {
		why += ": " + r.Reason
	}
	keep := max(r.Grace, st.TTL) + time.Minute
	marked, revoked := 0, keyspace.Revoked(nm.key)
	var errs []error
	for _, a := range onNodes(ctx, c, "revoke", func(ctx context.Context, n *node) (struct{}, error) {
		_, err := n.RDB.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, t := range toks {
				p.HSet(ctx, revoked, t, why)
			}
			p.PExpire(ctx, revoked, keep)
			return nil
		})
		if err != nil {
			return struct{}{}, n.fail("revoke", err)
		}
		return struct{}{}, nil
	}) {
		if a.Err != nil {
			errs = append(errs, a.Err)
			continue
		}
		marked++
	}
	if marked <= len(c.nodes)/2 {
		return fmt.Errorf("dlock: revoke %q: too few nodes took the marks: %w", nm.key, errors.Join(errs...))
	}
	for _, t := range toks {
		c.audit(ctx, nm.key, t, st, r, "revoke", "grace_ms", r.Grace.Milliseconds())
	}
	return nil
}

// AuditLength is about how many entries each node's audit stream
// (keyspace.Audit, "dlock:audit") keeps.
const AuditLength = 10000

// audit adds an entry about the hold of token to every node's audit
// stream: the event, the key, hold, fence and owner record, who and why,
// and extra fields. A node that fails misses the entry.
func (c *Client) audit(ctx context.Context, key, token string, st Status, r Revocation, event string, extra ...any) {
	holder := tokens.Redact(token)
	values := []any{"event", event, "key", key, "holder", holder, "fence", st.Fence, "by", r.By, "reason", r.Reason}
	for _, o := range st.Owners {
		if o.Holder == holder {
			values = append(values, "owner", fmt.Sprintf("%s pid %d %s %s", o.Host, o.PID, o.Program, o.Label))
		}
	}
	args := append([]any{"XADD", keyspace.Audit, "MAXLEN", "~", AuditLength, "*"}, append(values, extra...)...)
	onNodes(ctx, c, "revoke", func(ctx context.Context, n *node) (struct{}, error) {
		return struct{}{}, n.RDB.Do(ctx, args...).Err()
	})
}

// awaitLetGo waits until toks have let go (letGo), grace has passed or ctx
// has ended.
func (c *Client) awaitLetGo(ctx context.Context, nm *lockNames, toks []string, grace time.Duration) {
	end := time.NewTimer(grace)
	defer end.Stop()
	tick := time.NewTicker(min(max(grace/20, 10*time.Millisecond), 250*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-tick.C:
			if c.letGo(ctx, nm.key, toks) {
				return
			}
		}
	}
}

// letGo reports whether a majority of nodes answered and none of them
// holds any of toks: a poll that no majority answers tells nothing.
func (c *Client) letGo(ctx context.Context, key string, toks []string) bool {
	answers := c.inspectAll(ctx, key, "", c.revokeTimeout(), "revoke")
	if count(answers, func(keyState) bool { return true }).Of(len(c.nodes)) != quorum.Agreed {
		return false
	}
	left, _ := holdsOf(answers, "")
	return !slices.ContainsFunc(toks, func(t string) bool { return slices.Contains(left, t) })
}

// removeHold releases token's hold on every node as Unlock would, raising
// a lock's fence counter to at least fence, and reports whether any node
// still had it.
func (c *Client) removeHold(ctx context.Context, nm *lockNames, token string, fence int64, keep time.Duration) bool {
	removed := false
	for _, a := range onNodes(ctx, c, "revoke", func(ctx context.Context, n *node) (bool, error) {
		return n.release(ctx, nm, token, fence, keep, false)
	}) {
		removed = removed || (a.Err == nil && a.V)
	}
	return removed
}

// onNodes runs call on every node of c side by side, each bounded by
// revokeNodeTimeout on several nodes, and returns their answers in order.
func onNodes[T any](ctx context.Context, c *Client, op string, call func(context.Context, *node) (T, error)) []answer[T] {
	return round[T]{Op: op, Timeout: c.revokeTimeout(), Call: call}.Ask(ctx, c.work, c.nodes)
}

// revokedBy returns why a renewal found the hold revoked, if a node said so.
func revokedBy(answers []answer[renewal]) string {
	for _, a := range answers {
		if a.Err == nil && a.V.Revoked != "" {
			return a.V.Revoked
		}
	}
	return ""
}

// revoked ends the lease of a Lock whose hold was revoked, gives the key
// back, and returns the renewal's error.
func (l *Lock) revoked(why string) error {
	cause := fmt.Errorf("%w %s", ErrRevoked, why)
	l.lease.end(cause)
	l.giveBack()
	return fmt.Errorf("%w: %q (%w)", ErrNotHeld, l.Key(), cause)
}
