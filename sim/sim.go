// Package sim is a deterministic simulator of dlock's mutex wait protocol
// (internal/wait): simulated clients run waiters through the protocol's
// state machine and the real scripts on one embedded miniredis, on one
// simulated clock, with faults chosen by a seed, and the protocol's
// invariants are checked after every event (check.go). The same seed gives
// the same event log, byte for byte.
package sim

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/wait"
)

// Config is one run's shape; Default gives the usual one.
type Config struct {
	Seed                         uint64
	Clients, Workers, Rounds     int           // clients, concurrent callers each, Locks per caller
	TTL, Claim, Poll, Alive      time.Duration // the waiters' parameters (wait.Config)
	Retry, Keep, Timeout         time.Duration // Timeout: a lost reply is a failure this long after the send
	MaxDrift                     float64       // clients' clocks run at 1±MaxDrift; also the waiters' Drift
	Defects                      wait.Defects  // test-only defects of the waiters
	LongClaim                    bool          // test-only: hand-offs claim 10×TTL (defect b with KeepOnLeave)
	LastFirst                    bool          // test-only: the line's head is its last arrival (defect d)
	LooseFit                     bool          // test-only: a shared hold fits one permit too many, and a reader beside a writer (defects g, h)
	BareHandover                 bool          // test-only: a handover sets the waiter's TTL alone, less than the claim (defect i)
	FastBlind                    bool          // test-only: the fast acquire takes a free key without looking for a line (defect j)
	Unguarded                    bool          // test-only: the resource takes every write, stale fences too (defect e)
	PictureDir                   string        // where Porcupine draws a history it rejects ("": nowhere)
	StallBound, Limit            time.Duration // how long waiters may wait with no owner; the run's end
	NoFaults                     bool          // no lost replies or wakes, restarts, pauses, crashes or cancels
	Shared                       string        // "": mutexes; "s3": a semaphore of 3 permits; "rw": readers and writers, at random (shared.go)
	KeysLock, KeysFence, KeysQ   string
	KeysW, WakeChannel, LockName string
	KeysH                        string // a shared hold's holders' fences
}

// Default is the configuration of a run of seed.
func Default(seed uint64) Config {
	c := Config{Seed: seed, Clients: 4, Workers: 2, Rounds: 5,
		TTL: 2 * time.Second, Claim: 300 * time.Millisecond, Poll: 100 * time.Millisecond, Alive: 400 * time.Millisecond,
		Retry: 20 * time.Millisecond, Keep: 30 * time.Second, Timeout: 50 * time.Millisecond, MaxDrift: 0.01,
		Limit: 120 * time.Second}
	c.StallBound = c.Alive + c.Claim + c.Poll
	return c
}

// faults are what a seed chose.
type faults struct {
	lossP, dropP, lateP, cancelP float64
	restarts                     []time.Duration
}

type event struct {
	at  time.Duration
	seq uint64
	c   *client // a client's event waits out its pauses and dies with it
	fn  func()
}

type queue []*event

func (q queue) Len() int { return len(q) }
func (q queue) Less(i, j int) bool {
	return q[i].at < q[j].at || q[i].at == q[j].at && q[i].seq < q[j].seq
}
func (q queue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *queue) Push(x any)   { *q = append(*q, x.(*event)) }
func (q *queue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type client struct {
	name        string
	rate        float64 // its clock's rate
	crashed     bool
	pausedUntil time.Duration
}

type worker struct {
	c     *client
	name  string
	index int
	round int
}

// waiter is one Lock call: the state machine and what the checks know of it.
type waiter struct {
	wk                    *worker
	w                     *wait.Waiter
	id                    string
	cancelled, served     bool
	unfair                bool // paused while waiting: its place may be lost
	holding               bool
	fence                 int64
	leaseEnd              time.Duration // simulated time
	epoch, arrivalEpoch   int           // the server's epoch at its last script; of arrival
	arrival               time.Duration // its first QUEUED in arrivalEpoch; -1: none
	grants                int
	handoffAt, acquiredAt time.Duration // server times: the last hand-off to it, its last acquire
	handedOver            bool          // the last hand-off to it was a handover (its TTL, no claim)
}

// Sim is one run.
type Sim struct {
	cfg       Config
	rnd       *rand.Rand
	f         faults
	r         *redis
	now       time.Duration
	seq       uint64
	q         queue
	log       strings.Builder
	clients   []*client
	waiters   []*waiter
	byID      map[string]*waiter
	epoch     int // server restarts without data so far
	violation string
	claim     time.Duration // the claim the protocol promises (Config.Claim before LongClaim)
	chk       checker
	res       resource
	// Stats
	Scripts, Grants, Events int
}

// New prepares a run of cfg.
func New(cfg Config) *Sim {
	if cfg.LockName == "" {
		cfg.LockName = "{L}"
	}
	n := cfg.LockName
	cfg.KeysLock, cfg.KeysFence, cfg.KeysQ, cfg.KeysW, cfg.WakeChannel = n+":lock", n+":fence", n+":queue", n+":waiters", "dlock:wake:"+n
	cfg.KeysH = n + ":holders"
	claim := cfg.Claim
	if cfg.LongClaim {
		cfg.Claim = 10 * cfg.TTL
	}
	s := &Sim{cfg: cfg, claim: claim, rnd: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), r: newRedis(), byID: map[string]*waiter{}}
	s.chk.maxFence, s.chk.issued = 0, map[string]int64{}
	pick := func(p ...float64) float64 { return p[s.rnd.IntN(len(p))] }
	s.f = faults{lossP: pick(0, 0.05, 0.2), dropP: pick(0, 0.1, 0.5), lateP: pick(0, 0.2), cancelP: pick(0.1, 0.3)}
	if cfg.NoFaults {
		s.f = faults{}
	}
	for range s.rnd.IntN(3) * btoi(!cfg.NoFaults) {
		s.f.restarts = append(s.f.restarts, s.dur(0, 5*time.Second))
	}
	s.logf("seed %d: loss %.2f drop %.2f late %.2f cancel %.2f restarts %v", cfg.Seed, s.f.lossP, s.f.dropP, s.f.lateP, s.f.cancelP, s.f.restarts)
	return s
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Sim) dur(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(s.rnd.Int64N(int64(hi-lo)+1))
}
func (s *Sim) chance(p float64) bool { return p > 0 && s.rnd.Float64() < p }

// net is a message's delay: usually under 3ms, sometimes 20ms.
func (s *Sim) net() time.Duration {
	if s.chance(0.05) {
		return s.dur(3*time.Millisecond, 20*time.Millisecond)
	}
	return s.dur(200*time.Microsecond, 3*time.Millisecond)
}

func (s *Sim) logf(format string, a ...any) {
	fmt.Fprintf(&s.log, "%10.3fms ", float64(s.now)/1e6)
	fmt.Fprintf(&s.log, format, a...)
	s.log.WriteByte('\n')
}

func (s *Sim) at(t time.Duration, c *client, fn func()) {
	s.seq++
	heap.Push(&s.q, &event{at: t, seq: s.seq, c: c, fn: fn})
}

// local is c's clock at simulated time t; sim converts back.
func (s *Sim) local(c *client, t time.Duration) time.Time {
	return epoch0.Add(time.Duration(float64(t) * c.rate))
}
func (s *Sim) sim(c *client, t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(epoch0)) / c.rate)
}

// Run runs the simulation to its end or its first violation, and returns
// the violation ("" for none).
func (s *Sim) Run() string {
	for i := range s.cfg.Clients {
		c := &client{name: "c" + strconv.Itoa(i), rate: 1 + s.cfg.MaxDrift*(2*s.rnd.Float64()-1)}
		s.clients = append(s.clients, c)
		for j := range s.cfg.Workers {
			wk := &worker{c: c, name: c.name + "w" + strconv.Itoa(j), index: len(s.clients)*10 + j}
			s.at(s.dur(0, 50*time.Millisecond), c, func() { s.lock(wk) })
		}
		if cfg := s.cfg; cfg.NoFaults {
			continue
		}
		if s.chance(0.3) {
			at, d := s.dur(0, 4*time.Second), s.dur(50*time.Millisecond, 2*s.cfg.TTL)
			s.at(at, nil, func() { s.pause(c, d) })
		}
		if s.chance(0.2) {
			s.at(s.dur(0, 5*time.Second), nil, func() { s.crash(c) })
		}
	}
	for _, t := range s.f.restarts {
		s.at(t, nil, s.restart)
	}
	for s.runNext() {
		s.check()
	}
	if s.violation == "" {
		s.checkEnd()
	}
	return s.violation
}

// runNext runs the next event and reports whether it did: not when none
// is left, a violation was found, or the run passed its limit. The events
// of a crashed client are dropped; those of a paused one wait for it.
func (s *Sim) runNext() bool {
	for s.q.Len() > 0 && s.violation == "" {
		e := heap.Pop(&s.q).(*event)
		if e.at > s.cfg.Limit {
			s.fail("the run did not end by %v", s.cfg.Limit)
			return false
		}
		s.now = e.at
		switch {
		case e.c != nil && e.c.crashed:
		case e.c != nil && s.now < e.c.pausedUntil:
			s.at(e.c.pausedUntil, e.c, e.fn)
		default:
			e.fn()
			s.Events++
			return true
		}
	}
	return false
}

// Log is the run's event log.
func (s *Sim) Log() string { return s.log.String() }

func (s *Sim) fail(format string, a ...any) {
	if s.violation == "" {
		s.violation = fmt.Sprintf(format, a...)
		s.logf("VIOLATION: %s", s.violation)
	}
}

func (s *Sim) restart() {
	s.r.m.FlushAll()
	s.epoch++
	s.logf("server restarted without its data (epoch %d)", s.epoch)
}

func (s *Sim) pause(c *client, d time.Duration) {
	if c.crashed {
		return
	}
	c.pausedUntil = s.now + d
	s.logf("%s paused for %v", c.name, d)
	for _, w := range s.waiters {
		if w.wk.c == c && !w.served {
			w.unfair = true
		}
	}
}

func (s *Sim) crash(c *client) {
	c.crashed = true
	s.logf("%s crashed", c.name)
}

// lock starts a worker's next Lock, with a context that may end.
func (s *Sim) lock(wk *worker) {
	if wk.round == s.cfg.Rounds {
		return
	}
	wk.round++
	id := wk.name + "r" + strconv.Itoa(wk.round)
	cfg := s.cfg
	w := &waiter{wk: wk, id: id, arrival: -1, w: wait.New(wait.Config{ID: id, Token: s.kind() + id + "t", TTL: cfg.TTL, Keep: cfg.Keep,
		Alive: cfg.Alive, Poll: cfg.Poll, Claim: cfg.Claim, Retry: cfg.Retry, Drift: cfg.MaxDrift, Defects: cfg.Defects,
		Fast: s.chance(0.5)})}
	s.waiters = append(s.waiters, w)
	s.byID[id] = w
	if s.chance(s.f.cancelP) {
		s.at(s.now+s.dur(0, 600*time.Millisecond), wk.c, func() {
			if w.w.State() == wait.Acquiring || w.w.State() == wait.Queued {
				w.cancelled = true
				s.step(w, wait.Event{Kind: wait.Cancel, Err: fmt.Errorf("context canceled")})
			}
		})
	}
	s.step(w, wait.Event{Kind: wait.Start})
}

// step feeds w an event at its client's clock and carries out the commands.
func (s *Sim) step(w *waiter, ev wait.Event) {
	c := w.wk.c
	ev.Now = s.local(c, s.now)
	before := w.w.State()
	cmds := w.w.Step(ev)
	s.logf("%s %v %s -> %v %s", w.id, before, evName(ev), w.w.State(), cmdNames(cmds))
	for _, cmd := range cmds {
		switch cmd.Kind {
		case wait.RunAcquire, wait.RunRelease, wait.RunFastAcquire, wait.RunFastRelease:
			s.send(w, cmd.Kind, cmd.Args)
		case wait.Grant:
			s.granted(w, cmd)
		case wait.Fail:
			s.at(s.now+s.dur(0, 50*time.Millisecond), c, func() { s.lock(w.wk) })
		case wait.WakeAt:
			s.at(s.sim(c, cmd.At)+time.Microsecond, c, func() { s.step(w, wait.Event{Kind: wait.Timer}) })
		}
	}
}

// send runs a script at the server after a delay; its reply comes back
// after another, or it is lost and the send fails after Timeout.
func (s *Sim) send(w *waiter, kind wait.CommandKind, args []string) {
	sent, c := s.now, w.wk.c
	s.at(s.now+s.net(), nil, func() {
		res := s.exec(w, kind, args)
		if s.chance(s.f.lossP) {
			s.logf("%s: reply lost", w.id)
			s.at(sent+s.cfg.Timeout, c, func() { s.step(w, wait.Event{Kind: wait.Failed}) })
			return
		}
		s.at(s.now+s.net(), c, func() {
			s.step(w, wait.Event{Kind: wait.Reply, Result: res})
			if next := s.byID[res.Next]; next != nil { // a handover: the releaser's driver tells its waiter
				s.step(next, wait.Event{Kind: wait.Handed, Fence: res.Fence, Since: s.local(c, sent)})
			}
		})
	})
}

// exec runs a script at the server, now, and tells the checks what it did.
func (s *Sim) exec(w *waiter, kind wait.CommandKind, args []string) wait.Result {
	s.Scripts++
	release := kind == wait.RunRelease || kind == wait.RunFastRelease
	if !release {
		w.acquiredAt = s.now
	}
	keys := []string{s.cfg.KeysLock, s.cfg.KeysFence, s.cfg.KeysQ, s.cfg.KeysW, s.cfg.KeysH, s.cfg.WakeChannel}
	script := wait.AcquireScript
	switch kind {
	case wait.RunRelease: // the publish command, and the releaser's Client's waiter name prefix (a handover)
		script, args = wait.ReleaseScript, append(args[:4:4], "PUBLISH", w.wk.c.name+"w")
	case wait.RunFastAcquire:
		script, keys = wait.FastAcquireScript, keys[:3]
	case wait.RunFastRelease:
		script, keys = wait.FastReleaseScript, []string{keys[0], keys[2]}
	}
	if s.cfg.LastFirst {
		script = strings.ReplaceAll(script, "redis.call('ZRANGE', Q, 0, 0)", "redis.call('ZRANGE', Q, -1, -1)")
	}
	if s.cfg.BareHandover {
		script = strings.ReplaceAll(script, "'PX', math.max(tonumber(ttl), tonumber(ARGV[2])))", "'PX', ttl)")
	}
	if s.cfg.FastBlind {
		script = strings.ReplaceAll(script, "redis.call('EXISTS', KEYS[3]) == 0 and ", "")
	}
	if s.cfg.LooseFit {
		script = strings.ReplaceAll(script, "return count < n", "return count <= n")
		script = strings.ReplaceAll(script, "return k == 'r' and fk == 'r'", "return k == 'r'")
	}
	s.r.wakes = nil
	reply := s.r.eval(s.now, script, keys, args)
	res, err := wait.ParseReply(kind, kind == wait.RunAcquire && args[4] == "1", reply)
	if err != nil {
		s.fail("%s: %v", w.id, err)
	}
	w.epoch = s.epoch
	s.logf("server: %s %s -> %v", scriptNames[kind], strings.Join(args, " "), reply)
	switch {
	case !release && res.Status == wait.Granted:
		s.fenced(w, res.Fence)
	case release && res.Next != "":
		next := s.byID[res.Next]
		next.epoch, next.handoffAt, next.handedOver = s.epoch, s.now, true
		s.issue(next, res.Fence, true)
	case !release && res.Status == wait.Enqueued && (w.arrival < 0 || w.arrivalEpoch != s.epoch):
		w.arrival, w.arrivalEpoch = s.now, s.epoch
	}
	for _, msg := range s.r.wakes {
		s.wake(msg)
	}
	return res
}

// wake delivers a wake message "id fence" to its waiter, unless dropped;
// some are late, which reorders them.
func (s *Sim) wake(msg string) {
	id, f, _ := strings.Cut(msg, " ")
	fence, _ := strconv.ParseInt(f, 10, 64)
	w := s.byID[id]
	if w == nil {
		s.fail("a wake message names %q, no waiter", id)
		return
	}
	if fence != 0 { // a hand-off; "id 0" only says the key may be taken now
		w.epoch, w.handoffAt, w.handedOver = s.epoch, s.now, false
		s.issue(w, fence, true)
	}
	if s.chance(s.f.dropP) {
		s.logf("wake for %s dropped", id)
		return
	}
	d := s.net()
	if s.chance(s.f.lateP) {
		d = s.dur(0, 400*time.Millisecond)
	}
	s.at(s.now+d, w.wk.c, func() { s.step(w, wait.Event{Kind: wait.Wake, Fence: fence}) })
}

// granted is Lock's return: the holder writes to the guarded resource with
// its fence while its lease lasts, then unlocks.
func (s *Sim) granted(w *waiter, cmd wait.Command) {
	c := w.wk.c
	w.holding, w.fence, w.leaseEnd = true, cmd.Fence, s.sim(c, cmd.Lease)
	s.Grants++
	if w.grants++; w.grants > 1 {
		s.fail("%s granted twice", w.id)
	}
	s.checkGrant(w)
	hold := s.dur(time.Millisecond, 150*time.Millisecond)
	for range 1 + s.rnd.IntN(2) {
		s.at(s.now+s.dur(0, hold), c, func() {
			if w.holding && s.now < w.leaseEnd { // the lease, checked; the send may come after a pause
				s.at(s.now+time.Millisecond, c, func() { s.res.write(s, w) })
			}
		})
	}
	s.at(s.now+hold, c, func() {
		w.holding = false
		s.step(w, wait.Event{Kind: wait.Unlock})
		s.at(s.now+s.dur(0, 50*time.Millisecond), c, func() { s.lock(w.wk) })
	})
}

func evName(ev wait.Event) string {
	switch ev.Kind {
	case wait.Start:
		return "Start"
	case wait.Reply:
		return fmt.Sprintf("Reply%+v", ev.Result)
	case wait.Failed:
		return "Failed"
	case wait.Wake:
		return "Wake(" + strconv.FormatInt(ev.Fence, 10) + ")"
	case wait.Timer:
		return "Timer"
	case wait.Cancel:
		return "Cancel"
	case wait.Handed:
		return fmt.Sprintf("Handed(%d since %s)", ev.Fence, ev.Since.Sub(epoch0))
	}
	return "Unlock"
}

var scriptNames = map[wait.CommandKind]string{wait.RunAcquire: "acquire", wait.RunRelease: "release",
	wait.RunFastAcquire: "fast acquire", wait.RunFastRelease: "fast release"}

func cmdNames(cmds []wait.Command) string {
	var b strings.Builder
	for _, c := range cmds {
		switch c.Kind {
		case wait.RunAcquire, wait.RunRelease, wait.RunFastAcquire, wait.RunFastRelease:
			b.WriteString("[" + scriptNames[c.Kind] + "]")
		case wait.Grant:
			fmt.Fprintf(&b, "[grant %d until %s]", c.Fence, c.Lease.Sub(epoch0))
		case wait.Fail:
			b.WriteString("[fail]")
		case wait.WakeAt:
			fmt.Fprintf(&b, "[wake at %s]", c.At.Sub(epoch0))
		}
	}
	return b.String()
}
