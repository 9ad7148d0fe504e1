package sim

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/listen"
	"github.com/dlock-go/dlock/internal/wait"
)

// Redlock simulates dlock's listening wait (internal/listen's Line, the
// decisions of Lock with Redlock) over several embedded miniredis nodes
// that run the real Redlock scripts (scripts/acquire.lua and release.lua),
// on the same engine as Sim: simulated clients with drifting clocks, each
// with a Line per key, whose turns attempt on every node and judge the
// answers as dlock does (a majority granted within the lease, or the
// grants given back). Faults: lost replies, release messages dropped or
// late, clients paused past their leases, callers that give up at any
// moment. Checked after every event: at most one holder whose lease has
// not ended; fences strictly increase from holder to holder; within a
// Client, a grant goes to the first in line; at the end, everyone was
// served, no line is left, and no notify key outlives its window.
type Redlock struct {
	*Sim
	rc               RedlockConfig
	nodes            []*redis
	acquire, release string
	clients          []*rclient
	maxFence         int64
	holder           *rwaiter // the last holder whose lease may not have ended
	// Stats
	Attempts int
}

// RedlockConfig is one run's shape; DefaultRedlock gives the usual one.
type RedlockConfig struct {
	Seed                            uint64
	Nodes, Clients, Workers, Rounds int
	TTL, Timeout, Limit             time.Duration
	MaxDrift                        float64
	NoFaults                        bool
	Minority                        bool           // test-only defect k: an attempt is judged granted by a minority of the nodes
	Defects                         listen.Defects // test-only defects of the Lines (defect l: LastFirst)
}

// DefaultRedlock is the configuration of a run of seed.
func DefaultRedlock(seed uint64) RedlockConfig {
	return RedlockConfig{Seed: seed, Nodes: 3, Clients: 3, Workers: 3, Rounds: 4,
		TTL: time.Second, Timeout: 50 * time.Millisecond, Limit: 120 * time.Second, MaxDrift: 0.01}
}

// The key, and its derived names as the Redlock scripts take them.
var (
	rkey   = "R"
	rnames = []string{rkey, keyspace.Fence(rkey), keyspace.Notify(rkey)}
)

type rclient struct {
	*client
	line       *listen.Line // nil: nobody waits
	waiters    map[listen.ID]*rwaiter
	subscribed []bool // the line's subscription, per node, as the node sees it
	ids        listen.ID
}

type rwaiter struct {
	c          *rclient
	name       string
	id         listen.ID
	rounds     int
	token      string // its last attempt's
	tries      int
	cancelled  bool // the caller gave up while its attempt was under way
	holding    bool
	leaseEnd   time.Duration // simulated time
	fence      int64
	attempting bool
}

// NewRedlock prepares a run of rc, reading the Redlock scripts from the
// module beside this one.
func NewRedlock(rc RedlockConfig) (*Redlock, error) {
	acq, err := os.ReadFile("../scripts/acquire.lua")
	if err != nil {
		return nil, err
	}
	rel, err := os.ReadFile("../scripts/release.lua")
	if err != nil {
		return nil, err
	}
	base := New(Config{Seed: rc.Seed, Limit: rc.Limit, MaxDrift: rc.MaxDrift, NoFaults: rc.NoFaults})
	base.log.Reset()
	s := &Redlock{Sim: base, rc: rc, acquire: wait.FencePrelude + string(acq), release: string(rel)}
	for range rc.Nodes {
		s.nodes = append(s.nodes, newRedis())
	}
	s.logf("redlock seed %d: %d nodes, loss %.2f drop %.2f late %.2f cancel %.2f", rc.Seed, rc.Nodes, s.f.lossP, s.f.dropP, s.f.lateP, s.f.cancelP)
	return s, nil
}

// Run runs the simulation to its end or its first violation, and returns
// the violation ("" for none).
func (s *Redlock) Run() string {
	for i := range s.rc.Clients {
		c := &rclient{client: &client{name: "c" + strconv.Itoa(i), rate: 1 + s.rc.MaxDrift*(2*s.rnd.Float64()-1)},
			waiters: map[listen.ID]*rwaiter{}, subscribed: make([]bool, s.rc.Nodes)}
		s.clients = append(s.clients, c)
		for j := range s.rc.Workers {
			w := &rwaiter{c: c, name: c.name + "w" + strconv.Itoa(j)}
			s.at(s.dur(0, 50*time.Millisecond), c.client, func() { s.lock(w) })
		}
		if !s.rc.NoFaults && s.chance(0.3) {
			at, d := s.dur(0, 4*time.Second), s.dur(50*time.Millisecond, 2*s.rc.TTL)
			s.at(at, nil, func() { s.pause(c.client, d) })
		}
	}
	for s.runNext() {
	}
	if s.violation == "" {
		s.checkRedlockEnd()
	}
	return s.violation
}

// lock starts a worker's next Lock call in its client's line, with a
// context that may end.
func (s *Redlock) lock(w *rwaiter) {
	if w.rounds == s.rc.Rounds {
		return
	}
	w.rounds++
	c := w.c
	c.ids++
	w.id, w.cancelled, w.tries = c.ids, false, 0
	c.waiters[w.id] = w
	if c.line == nil {
		c.line = listen.New(s.rc.Nodes)
		c.line.Defects = s.rc.Defects
	}
	if s.chance(s.f.cancelP) {
		id := w.id
		s.at(s.now+s.dur(0, 600*time.Millisecond), c.client, func() { s.cancel(w, id) })
	}
	s.step(c, c.line, listen.Event{Kind: listen.Enter, ID: w.id})
}

// cancel ends call id's context: between attempts it leaves the line; during
// one, its result is final unless it obtained the lock.
func (s *Redlock) cancel(w *rwaiter, id listen.ID) {
	c := w.c
	if w.id != id || c.waiters[id] != w {
		return // that call returned
	}
	if w.attempting {
		w.cancelled = true
		return
	}
	delete(c.waiters, id)
	s.step(c, c.line, listen.Event{Kind: listen.Leave, ID: id})
	s.at(s.now+s.dur(0, 50*time.Millisecond), c.client, func() { s.lock(w) })
}

// step feeds line an event at its client's clock and carries out the
// commands; an event for a line that has ended is dropped, as the driver
// drops its readers' events.
func (s *Redlock) step(c *rclient, line *listen.Line, ev listen.Event) {
	if line == nil || c.line != line {
		return
	}
	ev.Now, ev.Rand = s.local(c.client, s.now), s.rnd.Uint64()
	cmds := line.Step(ev)
	s.logf("%s %s -> %s", c.name, revName(ev), rcmdNames(cmds))
	for _, cmd := range cmds {
		w := c.waiters[cmd.ID]
		switch cmd.Kind {
		case listen.Subscribe:
			for i := range s.nodes {
				s.at(s.now+s.net(), nil, func() {
					if c.line != line {
						return
					}
					c.subscribed[i] = true
					s.at(s.now+s.net(), c.client, func() { s.step(c, line, listen.Event{Kind: listen.Ready, Node: i}) })
				})
			}
		case listen.Unsubscribe:
			c.line = nil
			clear(c.subscribed)
		case listen.Timer:
			s.at(s.sim(c.client, cmd.At)+time.Microsecond, c.client, func() { s.step(c, line, listen.Event{Kind: listen.Tick}) })
		case listen.Attempt:
			s.attempt(w, line)
		case listen.Return:
			delete(c.waiters, cmd.ID)
			if w.holding {
				s.at(s.now+s.dur(time.Millisecond, s.rc.TTL/2), c.client, func() { s.unlock(w) })
			} else {
				s.at(s.now+s.dur(0, 50*time.Millisecond), c.client, func() { s.lock(w) })
			}
		}
	}
}

// attempt runs the acquire script on every node and judges the answers
// when all came, or at the timeout.
func (s *Redlock) attempt(w *rwaiter, line *listen.Line) {
	s.Attempts++
	c, sent := w.c, s.now
	w.attempting, w.tries = true, w.tries+1
	w.token = fmt.Sprintf("t-%sr%da%d", w.name, w.rounds, w.tries) // a token per attempt, as dlock's try makes
	token := w.token
	type answer struct {
		fence int64
		pttl  time.Duration
		ok    bool
	}
	answers := make([]*answer, len(s.nodes))
	lost := make([]bool, len(s.nodes))
	judged, got := false, 0
	judge := func() {
		if judged {
			return
		}
		judged = true
		granted, fence, pttl := 0, int64(0), time.Duration(0)
		for _, a := range answers {
			switch {
			case a == nil:
			case a.ok:
				granted++
				fence = max(fence, a.fence)
			case a.pttl > 0 && (pttl == 0 || a.pttl < pttl):
				pttl = a.pttl
			}
		}
		need := len(s.nodes)/2 + 1
		if s.rc.Minority {
			need = 1
		}
		start := s.local(c.client, sent)
		until := start.Add(s.rc.TTL - s.rc.TTL/100 - 2*time.Millisecond)
		w.attempting = false
		ev := listen.Event{Kind: listen.Result, ID: w.id, Outcome: listen.Taken, PTTL: pttl}
		switch {
		case granted >= need && s.local(c.client, s.now).Before(until):
			ev.Outcome, ev.Until = listen.Granted, until
			s.granted(w, fence, s.sim(c.client, until))
		default:
			for i, a := range answers { // give back what was granted, or may have been
				if (a != nil && a.ok) || lost[i] {
					s.at(s.now+s.net(), nil, func() { s.runRelease(i, token) })
				}
			}
			switch {
			case w.cancelled:
				ev.Outcome = listen.Final
			case granted > 0:
				ev.Outcome = listen.Split
			}
		}
		s.step(c, line, ev)
	}
	for i, n := range s.nodes {
		s.at(s.now+s.net(), nil, func() {
			s.Scripts++
			reply := n.eval(s.now, s.acquire, rnames,
				[]string{token, ms(s.rc.TTL), ms(30 * time.Second), ms(3 * time.Second)})
			s.publish(i, n)
			s.logf("node %d: acquire %s -> %v", i, token, reply)
			if s.chance(s.f.lossP) {
				lost[i] = true
				return
			}
			a := &answer{}
			switch v := reply.(type) {
			case string:
				a.ok = true
				a.fence, _ = strconv.ParseInt(v, 10, 64)
			case int:
				a.pttl = time.Duration(v) * time.Millisecond
			}
			s.at(s.now+s.net(), c.client, func() {
				answers[i] = a
				if got++; got == len(s.nodes) {
					judge()
				}
			})
		})
	}
	s.at(sent+s.rc.Timeout, c.client, judge)
}

// granted checks a new holder: no other holder's lease runs, and its fence
// is above every earlier one.
func (s *Redlock) granted(w *rwaiter, fence int64, leaseEnd time.Duration) {
	if h := s.holder; h != nil && h.holding && h.leaseEnd > s.now {
		s.fail("%s obtained the lock while %s holds it until %v", w.token, h.token, h.leaseEnd)
	}
	if fence <= s.maxFence {
		s.fail("%s obtained fence %d, not above %d", w.token, fence, s.maxFence)
	}
	for _, o := range w.c.waiters { // within a Client, in arrival order
		if o.id < w.id && o != w {
			s.fail("%s obtained the lock before %sr%d of its Client, which came first", w.token, o.name, o.rounds)
		}
	}
	s.maxFence = fence
	w.holding, w.leaseEnd, w.fence = true, leaseEnd, fence
	s.holder = w
	s.Grants++
	s.logf("%s holds, fence %d, until %v", w.token, fence, leaseEnd)
}

// unlock ends w's hold and releases the key on every node; once the nodes
// answered (or not, after the timeout), its Client's line learns of it.
func (s *Redlock) unlock(w *rwaiter) {
	w.holding = false
	c, token := w.c, w.token
	for i := range s.nodes {
		s.at(s.now+s.net(), nil, func() { s.runRelease(i, token) })
	}
	s.at(s.now+s.rc.Timeout, c.client, func() {
		s.step(c, c.line, listen.Event{Kind: listen.Freed})
		s.lock(w)
	})
}

// runRelease runs the release script of token on node i.
func (s *Redlock) runRelease(i int, token string) {
	s.Scripts++
	n := s.nodes[i]
	reply := n.eval(s.now, s.release, rnames, []string{token})
	s.logf("node %d: release %s -> %v", i, token, reply)
	s.publish(i, n)
}

// publish delivers what node i's last script published to the clients
// subscribed there, each message dropped or late at random.
func (s *Redlock) publish(i int, n *redis) {
	for range n.wakes {
		for _, c := range s.clients {
			if !c.subscribed[i] || s.chance(s.f.dropP) {
				continue
			}
			d := s.net()
			if s.chance(s.f.lateP) {
				d = s.dur(0, 400*time.Millisecond)
			}
			line := c.line
			s.at(s.now+d, c.client, func() { s.step(c, line, listen.Event{Kind: listen.Released, Node: i}) })
		}
	}
	n.wakes = nil
}

// checkRedlockEnd checks the end of a run: every call served, no line
// left, and after the notify window no key but the fencing counters.
func (s *Redlock) checkRedlockEnd() {
	for _, c := range s.clients {
		if c.line != nil || len(c.waiters) > 0 {
			s.fail("%s's line is left with %d waiters", c.name, len(c.waiters))
		}
	}
	later := s.now + 4*time.Second
	for i, n := range s.nodes {
		keys, _ := n.do(later, "KEYS", "*").([]any)
		for _, k := range keys {
			if k != rnames[1] {
				s.fail("node %d keeps %v after the run", i, k)
			}
		}
	}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

var revNames = []string{"Enter", "Leave", "Ready", "Released", "Freed", "Tick", "Result"}
var routNames = []string{"Granted", "Taken", "Split", "Final"}
var rcmdKinds = []string{"Subscribe", "Unsubscribe", "Attempt", "Return", "Timer"}

func revName(ev listen.Event) string {
	s := revNames[ev.Kind]
	switch ev.Kind {
	case listen.Enter, listen.Leave:
		s += " " + strconv.FormatUint(uint64(ev.ID), 10)
	case listen.Ready, listen.Released:
		s += " node " + strconv.Itoa(ev.Node)
	case listen.Result:
		s += fmt.Sprintf(" %d %s", ev.ID, routNames[ev.Outcome])
	}
	return s
}

func rcmdNames(cmds []listen.Command) string {
	var b []string
	for _, c := range cmds {
		n := rcmdKinds[c.Kind]
		if c.ID != 0 {
			n += " " + strconv.FormatUint(uint64(c.ID), 10)
		}
		b = append(b, n)
	}
	return "[" + strings.Join(slices.Clip(b), ", ") + "]"
}
