package dlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/transport"
	"github.com/dlock-go/dlock/internal/wait"
)

// The line: a mutex's wait on one node, internal/wait's state machine
// driven here (docs/design.md, "The wait protocol"). The Waiter decides;
// waitInLine only carries its commands out (a script, a timer, the
// caller's answer) and feeds it what comes back (a reply or a failure, a
// wake message naming it, the time, the caller giving up).

// The line's timing. A waiter re-runs acquire every linePoll as its
// keepalive, so its record, alive for lineAlive after each run, outlives a
// lost run or two; a hand-off's claim gives the next waiter lineClaim to
// confirm before the key, unconfirmed, expires (a waiter that died unseen
// holds the line up that long at most). Failed scripts are retried from
// outageFirst, doubling to outageMost (outage.go).
const (
	lineAlive = time.Second
	linePoll  = lineAlive / 3
	lineClaim = lineAlive
)

var (
	lineAcquire = transport.NewScript(wait.AcquireScript)
	lineRelease = transport.NewScript(wait.ReleaseScript)
)

// acquireLine runs the line's acquire for token: granted, or the holder's
// TTL. id, when not "", queues the caller if the key is not granted.
func (n *node) acquireLine(ctx context.Context, nm *lockNames, token, id string, o options) (grant, error) {
	join, idArg := argNo, argNone
	if id != "" {
		join, idArg = argYes, id
	}
	args := []any{token, o.ttl.Milliseconds(), max(o.fenceKeep(), lineClaim).Milliseconds(), idArg, join, argAlive, n.publish}
	var (
		res   any
		err   error
		acked = -1
	)
	if o.replicas > 0 {
		res, acked, err = n.RunAcked(ctx, lineAcquire, nm.line[:], o.replicas, o.replicaTimeout, args...)
	} else {
		res, err = n.Run(ctx, lineAcquire, nm.line[:], args...).Result()
	}
	if err != nil {
		return grant{}, n.fail("acquire", err)
	}
	r, err := wait.ParseReply(wait.RunAcquire, id != "", res)
	if err != nil {
		return grant{}, n.fail("acquire", err)
	}
	if r.Status != wait.Granted {
		return grant{pttl: r.PTTL}, nil
	}
	if acked >= 0 && acked < o.replicas {
		return grant{}, n.fail("acquire", fmt.Errorf("%w: %d of %d within %v", ErrNoReplicaAck, acked, o.replicas, o.replicaTimeout))
	}
	return grant{ok: true, fence: r.Fence}, nil
}

// The line scripts' constant arguments, boxed once.
var (
	argNone, argNo, argYes any = "", "0", "1"
	argAlive, argClaim     any = ms(lineAlive), ms(lineClaim)
)

// releaseLine runs the line's release for token: the key released (and
// handed to the first live waiter), or not held; id, if not "", is a
// waiter's that gives up, whose place is left too. keep is how long the
// fence counter is kept for a hand-off.
func (n *node) releaseLine(ctx context.Context, nm *lockNames, token, id string, keep time.Duration) (bool, error) {
	idArg := argNone
	if id != "" {
		idArg = id
	}
	sent := time.Now()
	res, err := n.Run(ctx, lineRelease, nm.line[:], token, argClaim, keep.Milliseconds(), idArg, n.publish, n.ownArg).Result()
	if err != nil {
		return false, n.fail("release", err)
	}
	r, err := wait.ParseReply(wait.RunRelease, false, res)
	if err != nil {
		return false, n.fail("release", err)
	}
	if r.Next != "" {
		n.handOver(nm.key, r.Next, r.Fence, sent)
	}
	return r.Status == wait.Released, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// wakeFor parses a wake message, "id fence", for the waiter id.
func wakeFor(id, payload string) (int64, bool) {
	rest, ok := strings.CutPrefix(payload, id+" ")
	if !ok {
		return 0, false
	}
	fence, err := strconv.ParseInt(rest, 10, 64)
	return fence, err == nil
}
