package sim

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dlock-go/dlock/internal/wait"
)

// checker is what the invariants remember between events.
type checker struct {
	maxFence   int64
	issued     map[string]int64 // token -> the fence issued with it
	stallSince time.Duration    // when waiters began to wait on nobody; -1 none
	stalled    bool
	head       string  // of a shared hold's queue, at the last event (ownedShared)
	handed     *waiter // the waiter a mutex's last fence was handed to by a release, if it was
}

// fenced is an acquire's GRANTED at the server: a new fence, or the one
// issued with this token (a confirmed hand-off, or a re-run after a lost reply).
func (s *Sim) fenced(w *waiter, f int64) {
	if s.chk.handed == w {
		s.chk.handed = nil // confirmed: from here on, its own grant
	}
	if f > s.chk.maxFence {
		s.issue(w, f, false)
	} else if s.chk.issued[w.w.Token()] != f {
		s.fail("%s granted fence %d, issued %d to its token (max %d)", w.id, f, s.chk.issued[w.w.Token()], s.chk.maxFence)
	}
}

// issue is a fence issued at the server to w (a grant or a hand-off):
// fences strictly increase across data loss, and live waiters are served
// in their order of arrival, each getting to use what it was handed.
func (s *Sim) issue(w *waiter, f int64, handed bool) {
	if f <= s.chk.maxFence {
		s.fail("fence %d issued to %s after %d", f, w.id, s.chk.maxFence)
		return
	}
	s.chk.maxFence, s.chk.issued[w.w.Token()] = f, f
	arrived := s.now
	if w.arrival >= 0 && w.arrivalEpoch == s.epoch {
		arrived = w.arrival
	}
	for _, y := range s.waiters {
		if y != w && s.waiting(y) && !y.unfair && !y.served && y.arrival >= 0 && y.arrivalEpoch == s.epoch && y.arrival < arrived {
			s.fail("%s served (arrived %v) before %s (arrived %v)", w.id, arrived, y.id, y.arrival)
		}
	}
	// A mutex's grant supersedes the last one: if that was a hand-off (the
	// releaser's, with a claim or a handover), its waiter, still alive and
	// waiting on a server that kept its data, must have got to use it. (A
	// waiter's own grant whose reply is lost can lapse unused: its TTL may
	// be shorter than the wait for that reply.)
	if y := s.chk.handed; s.cfg.Shared == "" && y != nil && y != w && s.waiting(y) && !y.unfair && y.epoch == s.epoch {
		s.fail("%s served, while %s, handed the key before it, still waits", w.id, y.id)
	}
	s.chk.handed = nil
	if handed {
		s.chk.handed = w
	}
	w.served = true
}

// waiting is a live Lock call still waiting: its caller there, its client
// alive and running.
func (s *Sim) waiting(w *waiter) bool {
	st := w.w.State()
	return (st == wait.Acquiring || st == wait.Queued) && !w.cancelled && !w.wk.c.crashed && s.now >= w.wk.c.pausedUntil
}

// checkGrant: a Lock that returns holds at least the TTL it asked, counted
// from the send of the acquire that granted or confirmed it.
func (s *Sim) checkGrant(w *waiter) {
	if s.now >= w.leaseEnd || w.epoch != s.epoch {
		return // a lease already over (a pause), or data lost since
	}
	if s.cfg.Shared != "" {
		s.checkSharedGrant(w)
		return
	}
	if got := s.r.get(s.now, s.cfg.KeysLock); got != w.w.Token() {
		s.fail("%s's Lock returned, but the key holds %q", w.id, got)
	} else if end := s.now + s.r.pttl(s.now, s.cfg.KeysLock) + time.Millisecond; end < w.leaseEnd { // PTTL's ms truncate
		s.fail("%s's lease ends at %v, the key at %v", w.id, w.leaseEnd, end)
	}
}

// check runs after every event.
func (s *Sim) check() {
	// At most one holder whose lease has not ended, on a server that kept
	// its data (of a shared hold: as many as fit, shared.go).
	if s.cfg.Shared != "" {
		s.checkShared()
	} else {
		var holder *waiter
		for _, w := range s.waiters {
			if w.holding && s.now < w.leaseEnd && w.epoch == s.epoch {
				if holder != nil {
					s.fail("%s and %s both hold leases (to %v and %v)", holder.id, w.id, holder.leaseEnd, w.leaseEnd)
				}
				holder = w
			}
		}
	}
	// The queue and the records expire.
	for _, k := range []string{s.cfg.KeysQ, s.cfg.KeysW, s.cfg.KeysLock, s.cfg.KeysH} {
		if s.r.pttl(s.now, k) == -1 {
			s.fail("%s never expires", k)
		}
	}
	// Waiters do not wait long on a key nobody can use: free, or held by a
	// token whose owner neither holds it, nor may confirm it, nor is releasing it.
	live, owned := false, s.owned()
	for _, w := range s.waiters {
		live = live || s.waiting(w)
	}
	if live && !owned {
		if !s.chk.stalled {
			s.chk.stalled, s.chk.stallSince = true, s.now
		} else if s.now-s.chk.stallSince > s.cfg.StallBound {
			s.fail("live waiters have waited %v on a key nobody uses (%s)", s.now-s.chk.stallSince, s.describe())
		}
	} else {
		s.chk.stalled = false
	}
}

// describe is the key's value, for a message.
func (s *Sim) describe() string {
	if s.cfg.Shared != "" {
		return fmt.Sprint(s.r.do(s.now, "ZRANGE", s.cfg.KeysLock, "0", "-1", "WITHSCORES"))
	}
	return strconv.Quote(s.r.get(s.now, s.cfg.KeysLock))
}

// owned says the key holds a token whose owner may use it: a holder, a
// waiter that may confirm it, a release in flight, or a client that crashed
// or is paused (the key's TTL is the bound then).
func (s *Sim) owned() bool {
	if s.cfg.Shared != "" {
		return s.ownedShared()
	}
	tok := s.r.get(s.now, s.cfg.KeysLock)
	if tok == "" {
		return false
	}
	w := s.owner(tok)
	if w == nil {
		return false
	}
	// A waiter that gave up never holds the key past the claim of a hand-off
	// it did not confirm, nor a handover (its TTL) past its leave.
	if w.cancelled && w.handedOver && w.w.State() == wait.Done {
		s.fail("%s gave up and left, and holds the key handed over to it", w.id)
	}
	if w.cancelled && w.handoffAt > w.acquiredAt && !w.handedOver {
		if end := s.now + s.r.pttl(s.now, s.cfg.KeysLock); end > w.handoffAt+s.claim+time.Millisecond {
			s.fail("%s gave up, and holds the key to %v, past its claim (%v)", w.id, end, w.handoffAt+s.claim)
		}
	}
	return s.mayUse(w, tok)
}

// mayUse says w, whose token tok the key holds, may use it: it holds it,
// may confirm it, is releasing it, or its client crashed or is paused (the
// key's TTL is the bound then).
func (s *Sim) mayUse(w *waiter, tok string) bool {
	if w.wk.c.crashed || s.now < w.wk.c.pausedUntil || w.holding {
		return true
	}
	switch w.w.State() {
	case wait.Releasing, wait.Leaving, wait.Held:
		return true
	case wait.Acquiring, wait.Queued:
		return w.w.Token() == tok
	}
	return false
}

// owner is the waiter whose token tok is (a lost reply's fresh token has
// a "'" more; a shared hold's starts with its kind, "~s3~" say).
func (s *Sim) owner(tok string) *waiter {
	if strings.HasPrefix(tok, "~") {
		if i := strings.Index(tok[1:], "~"); i >= 0 {
			tok = tok[i+2:]
		}
	}
	return s.byID[strings.TrimSuffix(strings.TrimRight(tok, "'"), "t")]
}

// checkEnd: when everyone has left, no queue, waiter record or lock
// remains past its TTL (the fence counter is meant to stay, for Keep).
func (s *Sim) checkEnd() {
	s.now += s.cfg.Alive + s.cfg.Claim + s.cfg.TTL + time.Millisecond
	for _, k := range []string{s.cfg.KeysQ, s.cfg.KeysW, s.cfg.KeysLock, s.cfg.KeysH} {
		if s.r.pttl(s.now, k) != -2 {
			s.fail("%s remains after everyone left", k)
		}
	}
	if s.violation == "" {
		if ok, info := porcupine.CheckOperationsVerbose(registerModel, s.res.ops, 0); ok != porcupine.Ok {
			picture := "none asked for"
			if s.cfg.PictureDir != "" {
				picture = filepath.Join(s.cfg.PictureDir, fmt.Sprintf("dlock-sim-seed-%d.html", s.cfg.Seed))
				if err := porcupine.VisualizePath(registerModel, info, picture); err != nil {
					picture = err.Error()
				}
			}
			s.fail("the guarded resource's history is not linearizable (%d operations; Porcupine's picture: %s)", len(s.res.ops), picture)
		}
	}
	s.logf("end: %d events, %d scripts, %d grants, %d resource operations, violation %q", s.Events, s.Scripts, s.Grants, len(s.res.ops), s.violation)
}

// resource is the guarded resource: a register that refuses a write whose
// fence is older than the newest it accepted. Each holder writes with its
// fence, then reads.
type resource struct {
	fence  int64
	value  int
	writes int
	ops    []porcupine.Operation
}

type regIn struct {
	write bool
	fence int64
	value int
}

type regState struct {
	fence int64
	value int
}

type regOut struct {
	ok    bool
	value int
}

// write sends w's write; it applies after a delay, and its answer comes
// back after another; then w reads.
func (r *resource) write(s *Sim, w *waiter) {
	r.writes++
	in, call := regIn{write: true, fence: w.fence, value: r.writes}, s.now
	s.at(s.now+s.net(), nil, func() {
		ok := in.fence >= r.fence || s.cfg.Unguarded
		if ok {
			r.fence, r.value = in.fence, in.value
		}
		s.logf("resource: %s writes %d with fence %d: %v", w.id, in.value, in.fence, ok)
		ret := s.now + s.net()
		r.ops = append(r.ops, porcupine.Operation{ClientId: w.wk.index, Input: in, Call: int64(call), Output: regOut{ok: ok}, Return: int64(ret)})
		rcall := ret + s.net()
		s.at(rcall+s.net(), nil, func() {
			r.ops = append(r.ops, porcupine.Operation{ClientId: w.wk.index, Input: regIn{}, Call: int64(rcall), Output: regOut{value: r.value}, Return: int64(s.now + s.net())})
		})
	})
}

// registerModel is the register with a fence, for Porcupine.
var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(regState), input.(regIn), output.(regOut)
		if !in.write {
			return out.value == st.value, st
		}
		ok := in.fence >= st.fence
		if ok {
			st.fence, st.value = in.fence, in.value
		}
		return out.ok == ok, st
	},
	DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
}
