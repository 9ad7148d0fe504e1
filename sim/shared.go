package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/wait"
)

// Shared holds: with Config.Shared set, every waiter asks for a shared hold
// of the one key (a sorted set of holders by expiry, their fences in a hash
// beside it), through the same scripts, and the checks count holders by
// kind instead of asking for one.

// kind is the token prefix of the next waiter's hold: none for a mutex;
// "~s3~" for a permit of a semaphore of 3; "~r~" or "~w~", at random, for
// a read-write lock.
func (s *Sim) kind() string {
	switch k := s.cfg.Shared; {
	case k == "":
		return ""
	case k == "rw" && s.rnd.IntN(3) == 0:
		return "~w~"
	case k == "rw":
		return "~r~"
	default:
		return "~" + k + "~"
	}
}

// permits is a semaphore's number of permits (0: a read-write lock).
func (s *Sim) permits() int {
	n, _ := strconv.Atoi(strings.TrimPrefix(s.cfg.Shared, "s"))
	return n
}

// checkShared: at most as many holders whose lease has not ended as fit,
// on a server that kept its data: a semaphore's permits; one writer alone,
// or readers.
func (s *Sim) checkShared() {
	var live []*waiter
	writers := 0
	for _, w := range s.waiters {
		if w.holding && s.now < w.leaseEnd && w.epoch == s.epoch {
			live = append(live, w)
			if strings.HasPrefix(w.w.Token(), "~w~") {
				writers++
			}
		}
	}
	switch p := s.permits(); {
	case p > 0 && len(live) > p:
		s.fail("%d hold permits of %d: %s", len(live), p, ids(live))
	case p == 0 && writers > 0 && len(live) > 1:
		s.fail("a writer holds beside others: %s", ids(live))
	}
}

// checkSharedGrant: a shared hold's Lock holds at least the TTL it asked:
// the key's score for its token is the hold's expiry (server ms).
func (s *Sim) checkSharedGrant(w *waiter) {
	score, ok := s.r.do(s.now, "ZSCORE", s.cfg.KeysLock, w.w.Token()).(string)
	if !ok {
		s.fail("%s's Lock returned, but the key does not hold %q", w.id, w.w.Token())
		return
	}
	ms, _ := strconv.ParseFloat(score, 64)
	end := time.UnixMilli(int64(ms)).Sub(epoch0) + time.Millisecond // ms truncate
	if end < w.leaseEnd {
		s.fail("%s's lease ends at %v, its hold at %v", w.id, w.leaseEnd, end)
	}
}

// ownedShared says the line moves or waits for a reason: the head of the
// queue changed since the last event (someone was served, left or was
// purged), or its hold does not fit beside the holds whose owners may use
// them. A head that fits and stays is a stall, which must end within
// StallBound: a live head takes its room at its next acquire (every Poll),
// a paused or dead one's record lapses within Alive and the next touch
// purges it.
func (s *Sim) ownedShared() bool {
	queued, _ := s.r.do(s.now, "ZRANGE", s.cfg.KeysQ, "0", "0").([]any)
	var head string
	if len(queued) > 0 {
		head, _ = queued[0].(string)
	}
	if head != s.chk.head {
		s.chk.head = head
		return true
	}
	w := s.byID[head]
	if w == nil {
		return true
	}
	now := strconv.FormatInt(epoch0.Add(s.now).UnixMilli(), 10)
	members, _ := s.r.do(s.now, "ZRANGEBYSCORE", s.cfg.KeysLock, "("+now, "+inf").([]any)
	usable, writer := 0, false
	for _, m := range members {
		tok, _ := m.(string)
		if o := s.owner(tok); o != nil && s.mayUse(o, tok) {
			usable++
			writer = writer || strings.HasPrefix(tok, "~w~")
		}
	}
	switch p := s.permits(); {
	case p > 0:
		return usable >= p
	case strings.HasPrefix(w.w.Token(), "~w~"):
		return usable > 0
	default:
		return writer
	}
}

func ids(ws []*waiter) string {
	var b strings.Builder
	for i, w := range ws {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(w.id)
		if w.w.State() != wait.Held {
			b.WriteString("(" + w.w.State().String() + ")")
		}
	}
	return b.String()
}
