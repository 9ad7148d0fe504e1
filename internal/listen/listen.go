// Package listen is the listening wait of dlock's Redlock as a state
// machine, after etcd's raft: no goroutines, channels, clocks or I/O. A
// driver (the root package's listen.go) feeds a Line events (a call that
// comes or goes, a node's subscription confirmed, a node's release message,
// the Client's own holder releasing, a timer, an attempt's outcome) and
// carries out the commands Step returns (subscribe, attempt, return, wake
// me at t, unsubscribe).
//
// Redlock does not queue in Redis: each node would order its waiters on
// its own. A Line is one Client's waiters on one key instead: they take
// turns in arrival order, and only the one whose turn it is listens and
// tries; the others wait without a word to Redis. A release thus costs each
// Client one attempt, and its waiters are served in order (across Clients,
// fairness stays best-effort). While anyone waits, the line is subscribed to
// the key's wake channel on every node, so a release between two turns still
// wakes the next; a turn tries when a majority of the nodes announced a
// release since its last attempt, or when its timer fires: jittered,
// doubling from MinWait to MaxWait, or just after the holder's TTL when
// sooner (for expiries and lost messages).
//
// States of the turn (the first waiter in line), events, commands and the
// next state:
//
//	state        event                        commands                    next
//	(no turn)    Enter                        Subscribe, Timer(now+MinWait) Subscribing
//	(no turn)    Enter, subscribed            (as a turn passed on)
//	Subscribing  Ready on every node, or Tick (as a turn passed on)
//	(passed on)  a holder of the Client's     Timer(its lease's end, at most now+MaxWait) Holding
//	(passed on)  no holder                    Attempt                      Attempting
//	Holding      Freed, a majority Released, or Tick  Attempt (Tick before the lease's end: wait = MaxWait) Attempting
//	Attempting   Result Granted               Return; the turn passes on, holder = Until
//	Attempting   Result Final                 Return; the turn passes on
//	Attempting   Result Taken/Split           Timer(now+delay)             Waiting
//	Attempting   Result Taken, woken          Attempt                      Attempting
//	Attempting   Result Split, woken          Timer(now+pause)             Pausing
//	Waiting      a majority Released, or Freed Attempt                     Attempting
//	Waiting      a majority Released, split   Timer(now+pause)             Pausing
//	Waiting      Tick                         Attempt (wait doubled)       Attempting
//	Pausing      Tick                         Attempt                      Attempting
//	any          Leave of the turn            the turn passes on
//	(last one)   the turn passes on, or Leave Unsubscribe                  (no line)
//
// Woken: a majority of the nodes announced a release since the turn's last
// attempt began (each node counted once; the marks are cleared as an
// attempt begins). A Tick before the turn's timer is due is ignored, as is
// any event for a call not in line.
package listen

import "time"

// The retry timer's bounds: a turn's first wait is MinWait, doubled after
// each timer that fired without a release, up to MaxWait.
const (
	MinWait = 16 * time.Millisecond
	MaxWait = time.Second
)

// ID names a call in a Line; the driver chooses them.
type ID uint64

// EventKind is what happened.
type EventKind uint8

// The events.
const (
	Enter    EventKind = iota // call ID begins to wait, at Now
	Leave                     // call ID stops waiting (its context ended, or the Client closed)
	Ready                     // node Node confirmed the line's subscription, at Now
	Released                  // node Node announced a release, at Now (Rand draws the pause)
	Freed                     // the Client's own holder of the key released it, at Now
	Tick                      // a timer fired, at Now
	Result                    // call ID's attempt ended: Outcome, PTTL, Until, at Now (Rand draws the delay)
)

// Outcome is how an attempt ended, as the driver classified it.
type Outcome uint8

// The outcomes.
const (
	Granted Outcome = iota // the lock was obtained: Until is its lease's end
	Taken                  // not obtained, and worth waiting for: PTTL is the shortest holder's TTL, or 0 unknown
	Split                  // not obtained: the nodes were split between waiters (the retry after a release waits a random pause, so that the split ones do not meet again)
	Final                  // not obtained, and not worth waiting for (an error, or the caller's context ended)
)

// Event is an input to Step.
type Event struct {
	Kind    EventKind
	ID      ID
	Node    int
	Outcome Outcome
	PTTL    time.Duration
	Until   time.Time
	Now     time.Time
	Rand    uint64 // uniform random bits, for the jitter
}

// CommandKind is what the driver is to do.
type CommandKind uint8

// The commands.
const (
	Subscribe   CommandKind = iota // watch the key's wake channel on every node, and report Ready and Released
	Unsubscribe                    // the line is empty: stop watching; the Line is done
	Attempt                        // call ID tries on every node now, and reports its Result
	Return                         // call ID returns with its attempt's result
	Timer                          // send a Tick at At (for call ID, whose turn it is)
)

// Command is an output of Step.
type Command struct {
	Kind CommandKind
	ID   ID
	At   time.Time
}

// phase is where the turn is.
type phase uint8

const (
	subscribing phase = iota
	holding
	attempting
	waiting
	pausing
)

// Line is one Client's listening waiters on one key. Its zero value is an
// empty line of a Client of one node; use New.
type Line struct {
	nodes int
	queue []ID // in arrival order; queue[0] has the turn

	phase phase
	due   time.Time     // when the turn's timer fires (subscribing, holding, waiting, pausing)
	wait  time.Duration // the turn's retry wait
	split bool          // the turn's last attempt found the nodes split

	subscribed bool
	ready      []bool // the nodes that confirmed the subscription
	freed      []bool // the nodes that announced a release since the turn's last attempt began
	woken      bool   // a majority of them did

	holder time.Time // a turn was passed on by a call that obtained the lock, held until then; zero: none, or freed

	// Defects is test-only; zero in production.
	Defects Defects
}

// Defects reintroduce bugs, for showing that the simulator (sim/) finds
// them.
type Defects struct {
	LastFirst bool // the turn passes on to the last in line, not the first
}

// New returns an empty Line of a Client of nodes nodes.
func New(nodes int) *Line {
	return &Line{nodes: nodes, ready: make([]bool, nodes), freed: make([]bool, nodes)}
}

// Empty reports whether nobody waits in the line.
func (l *Line) Empty() bool { return len(l.queue) == 0 }

// Step applies ev and returns the commands it calls for.
func (l *Line) Step(ev Event) []Command {
	switch ev.Kind {
	case Enter:
		return l.enter(ev)
	case Leave:
		return l.leave(ev)
	case Ready:
		return l.confirmed(ev)
	case Released:
		return l.released(ev)
	case Freed:
		l.holder = time.Time{}
		if len(l.queue) > 0 && (l.phase == holding || l.phase == waiting) {
			return l.attempt(nil)
		}
	case Tick:
		return l.tick(ev)
	case Result:
		return l.result(ev)
	}
	return nil
}

func (l *Line) enter(ev Event) []Command {
	l.queue = append(l.queue, ev.ID)
	if len(l.queue) > 1 {
		return nil
	}
	if l.subscribed {
		return l.begin(ev.Now)
	}
	l.subscribed = true
	l.phase, l.due = subscribing, ev.Now.Add(MinWait)
	return []Command{{Kind: Subscribe}, {Kind: Timer, ID: ev.ID, At: l.due}}
}

// begin starts the turn of queue[0], subscribed (or tired of waiting for
// it): it waits for the Client's holder, if the turn was passed on by one,
// or tries.
func (l *Line) begin(now time.Time) []Command {
	l.wait, l.split = MinWait, false
	if now.Before(l.holder) {
		l.phase, l.due = holding, minTime(l.holder, now.Add(MaxWait))
		return []Command{{Kind: Timer, ID: l.queue[0], At: l.due}}
	}
	return l.attempt(nil)
}

// attempt has the turn try: the release marks are cleared first, so that a
// release during the attempt wakes the wait after it.
func (l *Line) attempt(cmds []Command) []Command {
	l.phase = attempting
	clear(l.freed)
	l.woken = false
	return append(cmds, Command{Kind: Attempt, ID: l.queue[0]})
}

func (l *Line) confirmed(ev Event) []Command {
	if ev.Node < 0 || ev.Node >= l.nodes || !l.subscribed {
		return nil
	}
	l.ready[ev.Node] = true
	for _, r := range l.ready {
		if !r {
			return nil
		}
	}
	if len(l.queue) > 0 && l.phase == subscribing {
		return l.begin(ev.Now)
	}
	return nil
}

func (l *Line) released(ev Event) []Command {
	if ev.Node < 0 || ev.Node >= l.nodes || len(l.queue) == 0 || l.freed[ev.Node] {
		return nil
	}
	l.freed[ev.Node] = true
	n := 0
	for _, f := range l.freed {
		if f {
			n++
		}
	}
	if n < l.nodes/2+1 {
		return nil
	}
	l.woken = true
	switch l.phase {
	case waiting:
		return l.again(ev)
	case holding: // the key was released, by whoever held it
		return l.attempt(nil)
	}
	return nil
}

// again has a turn that was woken try again: at once, or after a random
// pause under MinWait when its last attempt found the nodes split.
func (l *Line) again(ev Event) []Command {
	if !l.split {
		return l.attempt(nil)
	}
	l.phase, l.due = pausing, ev.Now.Add(time.Duration(ev.Rand%uint64(MinWait)))
	return []Command{{Kind: Timer, ID: l.queue[0], At: l.due}}
}

func (l *Line) tick(ev Event) []Command {
	if len(l.queue) == 0 || l.phase == attempting || ev.Now.Before(l.due) {
		return nil
	}
	switch l.phase {
	case subscribing:
		return l.begin(ev.Now)
	case waiting:
		l.wait = min(2*l.wait, MaxWait)
	case holding:
		if ev.Now.Before(l.holder) { // no word of the holder's release for MaxWait: look, and then as seldom
			l.wait = MaxWait
		}
	}
	return l.attempt(nil)
}

func (l *Line) result(ev Event) []Command {
	if len(l.queue) == 0 || l.queue[0] != ev.ID || l.phase != attempting {
		return nil
	}
	switch ev.Outcome {
	case Granted:
		l.holder = ev.Until
		return l.pass(ev.Now, []Command{{Kind: Return, ID: ev.ID}})
	case Final:
		return l.pass(ev.Now, []Command{{Kind: Return, ID: ev.ID}})
	}
	l.split = ev.Outcome == Split
	if l.woken {
		return l.again(ev)
	}
	l.phase, l.due = waiting, ev.Now.Add(Delay(l.wait, ev.PTTL, ev.Rand))
	return []Command{{Kind: Timer, ID: ev.ID, At: l.due}}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Delay is how long a turn waits for a release before it tries again: about
// wait (between half of it and all of it), or just after the holder's TTL
// when that is under half of it.
func Delay(wait, holderTTL time.Duration, r uint64) time.Duration {
	if holderTTL > 0 && holderTTL < wait/2 {
		return holderTTL + time.Duration(r%uint64(wait/8+1))
	}
	return wait/2 + time.Duration(r%uint64(wait/2+1))
}

func (l *Line) leave(ev Event) []Command {
	i := 0
	for i < len(l.queue) && l.queue[i] != ev.ID {
		i++
	}
	switch {
	case i == len(l.queue):
		return nil
	case i > 0:
		l.queue = append(l.queue[:i], l.queue[i+1:]...)
		return nil
	}
	return l.pass(ev.Now, nil)
}

// pass gives the turn to the next in line, or ends the line.
func (l *Line) pass(now time.Time, cmds []Command) []Command {
	l.queue = l.queue[1:]
	if len(l.queue) == 0 {
		l.subscribed = false
		clear(l.ready)
		return append(cmds, Command{Kind: Unsubscribe})
	}
	if n := len(l.queue); l.Defects.LastFirst && n > 1 {
		l.queue = append([]ID{l.queue[n-1]}, l.queue[:n-1]...)
	}
	if l.phase == subscribing { // still not confirmed: the next turn waits out the same bound
		return append(cmds, Command{Kind: Timer, ID: l.queue[0], At: l.due})
	}
	return append(cmds, l.begin(now)...)
}
