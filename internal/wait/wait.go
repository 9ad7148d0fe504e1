// Package wait is the single-node mutex's wait protocol as a state machine,
// after etcd's raft: no goroutines, channels, clocks or I/O. A driver feeds
// a Waiter events (the caller's request, a script's reply or its failure, a
// wake message, a timer, the caller's context ending, the holder's unlock)
// and carries out the commands Step returns (run a script with these
// arguments, hand the caller its lock or its error, wake me at t).
//
// A waiter is a ticket in the lock's queue. A holder's release hands the
// key to the first live waiter (K set to its token for a claim, a fence
// issued, a wake message naming it); the waiter confirms it with acquire,
// which sets its TTL. A waiter re-runs acquire every Poll as its keepalive;
// a waiter that gives up runs release (leaving the line and passing on a
// grant it may hold); a crashed one is purged by the next touch once its
// record's alive time has passed. Scripts: acquire (queue), the holder's
// release (hand-off), acquire (confirm) for a contended hand-off, and no
// confirm for a handover within a Client (handover.go); acquire and
// release for an uncontended lock and unlock, or their fast variants
// (fast.go).
//
// States, events, commands and the next state ("in flight": one script at a
// time; a Wake or Cancel then only marks the waiter, acted on at the reply):
//
//	state      event                   commands                      next
//	Idle       Start                   Run acquire                   Acquiring
//	Acquiring  Reply GRANTED           Grant(fence, sent+TTL)        Held
//	Acquiring  Reply GRANTED, too late Run acquire (a fresh lease)   Acquiring
//	Acquiring  Reply QUEUED/TAKEN      WakeAt(now+Poll)              Queued
//	Acquiring  Reply QUEUED, woken     Run acquire                   Acquiring
//	Acquiring  Failed (outcome unknown) WakeAt(now+backoff)          Queued
//	Acquiring  Wake                    - (woken)                     Acquiring
//	Acquiring  Cancel                  Fail(err) (cancelled)         Acquiring
//	Acquiring  Reply/Failed, cancelled Run release                   Leaving
//	Queued     Wake, or Timer due      Run acquire                   Acquiring
//	Queued     Cancel                  Fail(err), Run release        Leaving
//	Queued     Handed                  (handover.go)
//	Held       Unlock                  Run release                   Releasing
//	Releasing  Reply/Failed            -                             Done
//	Leaving    Reply                   -                             Done
//	Leaving    Reply NOT_HELD, unsure  WakeAt(now+Retry) (unsure: no) Leaving
//	Leaving    Failed                  WakeAt(now+backoff)           Leaving
//	Leaving    Timer due               Run release                   Leaving
//
// Any other event is ignored. A lease is counted from the send of the
// acquire that granted or confirmed it, shortened by Drift; a grant whose
// reply comes after that lease ended is confirmed again. The backoff after
// a failure starts at Retry and doubles with each failure in a row, up to
// RetryMax (none: Retry each time). A waiter is unsure while its last
// acquire failed unanswered: the server may still run it, and grant it the
// key, after the leave; a leave that finds nothing then looks once more.
package wait

import (
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The scripts, for a driver to run with KEYS as their headers name them:
// each is the shared preludes (scripts/fence.lua, scripts/line.lua), then
// its own file. (The fast ones: fast.go.)
var (
	AcquireScript = fence + line + acquire
	ReleaseScript = fence + line + release
)

// FencePrelude is scripts/fence.lua, the line scripts' first prelude (KEYS[1]
// the lock, KEYS[2] its fence counter; issue_fence), for another script
// that issues fences the same way (Redlock's acquire).
var FencePrelude = fence

var (
	//go:embed scripts/fence.lua
	fence string
	//go:embed scripts/line.lua
	line string
	//go:embed scripts/acquire.lua
	acquire string
	//go:embed scripts/release.lua
	release string
)

// State is where a Waiter is in its protocol.
type State int

// A Waiter's states.
const (
	Idle      State = iota // not yet asked for the lock
	Acquiring              // an acquire is in flight
	Queued                 // in the line, waiting for a wake message or its timer
	Held                   // the caller holds the lock
	Releasing              // the holder's release is in flight
	Leaving                // a waiter that gave up: its release is in flight
	Done                   // finished
)

var stateNames = [...]string{"Idle", "Acquiring", "Queued", "Held", "Releasing", "Leaving", "Done"}

// String names the state.
func (s State) String() string { return stateNames[s] }

// EventKind is what happened.
type EventKind int

// The events a driver feeds a Waiter.
const (
	Start  EventKind = iota // the caller asks for the lock
	Reply                   // a script's reply, Event.Result
	Failed                  // a script failed or timed out: it may or may not have run
	Wake                    // a wake message naming this waiter, with Event.Fence
	Timer                   // a time asked for with WakeAt has come
	Cancel                  // the caller's context ended, with Event.Err
	Unlock                  // the holder unlocks
	Handed                  // the key handed over by a release of this waiter's own Client, with Event.Fence and Since (handover.go)
)

// Event is one input to Step. Now is the waiter's own clock.
type Event struct {
	Kind   EventKind
	Now    time.Time
	Result Result    // Reply
	Fence  int64     // Wake: the fence named by the message
	Err    error     // Cancel: the context's error
	Since  time.Time // Handed: the send of the release that handed the key over, by this waiter's clock
}

// Status is a script's answer.
type Status int

// The scripts' answers (the first element of their replies).
const (
	NotHeld  Status = 0 // release: the lock did not hold the token
	Released Status = 1 // release: released (and maybe handed on)
	Granted  Status = 1 // acquire: the lock is the caller's, with Result.Fence
	Enqueued Status = 2 // acquire: the caller waits in the line
	Taken    Status = 3 // acquire without join: held by another
	Slow     Status = 4 // a fast script: not done, the full one decides (fast.go)
)

// Result is a script's reply, parsed by ParseReply.
type Result struct {
	Status Status
	Fence  int64         // acquire GRANTED; release: the fence of a handover
	PTTL   time.Duration // acquire QUEUED or TAKEN: the holder's remaining TTL (-1 ns: none, or gone)
	Next   string        // release: the waiter of the releaser's Client the key was handed over to (handover.go)
}

// ParseReply parses the reply of the script that kind runs, told apart by
// type: acquire's fence (a string: GRANTED) or wait_ms (an integer: QUEUED
// if it was asked to join, else TAKEN); release's 1 (RELEASED), 0
// (NOT_HELD) or "id fence" (RELEASED, and handed over to that waiter:
// handover.go); the fast scripts' SLOW (fast.go). An integer may come as
// int64 (go-redis) or int (miniredis's reader).
func ParseReply(kind CommandKind, join bool, reply any) (Result, error) {
	release := kind == RunRelease || kind == RunFastRelease
	if s, ok := reply.(string); ok {
		if release {
			return parseHandover(s)
		}
		f, err := strconv.ParseInt(s, 10, 64)
		if err != nil || f <= 0 {
			return Result{}, errors.New("wait: bad fence " + strconv.Quote(s))
		}
		return Result{Status: Granted, Fence: f}, nil
	}
	var n int64
	switch v := reply.(type) {
	case int64:
		n = v
	case int:
		n = int64(v)
	default:
		return Result{}, fmt.Errorf("wait: unexpected reply %T from a line script", reply)
	}
	if (kind == RunFastRelease && n < 0) || kind == RunFastAcquire {
		return Result{Status: Slow}, nil
	}
	if release {
		return Result{Status: Status(min(max(n, 0), 1))}, nil
	}
	r := Result{Status: Taken, PTTL: -1}
	if n > 0 {
		r.PTTL = time.Duration(n) * time.Millisecond
	}
	if join {
		r.Status = Enqueued
	}
	return r, nil
}

// CommandKind is what the driver is to do.
type CommandKind int

// The commands Step returns.
const (
	RunAcquire     CommandKind = iota // run AcquireScript with Command.Args as ARGV
	RunRelease                        // run ReleaseScript with Command.Args as ARGV
	RunFastAcquire                    // run FastAcquireScript with Command.Args as ARGV (fast.go)
	RunFastRelease                    // run FastReleaseScript with Command.Args as ARGV (fast.go)
	Grant                             // hand the caller its lock: Fence, and Lease (its end, by the waiter's clock)
	Fail                              // hand the caller its error, Err
	WakeAt                            // feed a Timer event at At
)

// Command is one output of Step.
type Command struct {
	Kind  CommandKind
	Args  []string
	Fence int64
	Lease time.Time
	Err   error
	At    time.Time
}

// Config is one waiter's parameters.
type Config struct {
	ID, Token string
	TTL       time.Duration // the lease asked for
	Keep      time.Duration // how long the fence counter is kept; at least TTL and Claim
	Alive     time.Duration // a record is dead this long after its last touch
	Poll      time.Duration // the keepalive's period, well under Alive
	Claim     time.Duration // how long the next waiter has to confirm a hand-off; over Poll
	Retry     time.Duration // the wait after a failed script
	RetryMax  time.Duration // the longest wait after failures in a row; 0: always Retry
	Drift     float64       // the fraction of TTL given up for clock drift
	Fast      bool          // try the fast scripts first: the key was not contended lately (fast.go)
	Defects   Defects       // test-only; all false in production
}

// Defects reintroduce known bugs, for showing that the simulator finds
// them. Never set outside tests.
type Defects struct {
	NoConfirm   bool // a wake message grants without a confirming acquire
	KeepOnLeave bool // a waiter that gives up runs no release
	DropOnLoss  bool // after a failed acquire, a fresh token: a grant by that acquire is lost
	LateLease   bool // a handover's lease counts from its delivery, not from the release's send
}

// Waiter is one Lock call's protocol. Step's commands, and their Args, are
// the Waiter's own buffers: valid until the next Step (Args: for good).
type Waiter struct {
	cfg              Config
	out              [2]Command
	acquireArgs      [6]string
	releaseArgs      [4]string
	state            State
	sent             time.Time // the send of the acquire in flight
	timer            time.Time // the time asked for with WakeAt
	woken, cancelled bool
	unsure           bool // the last acquire failed unanswered: it may yet run
	fastOut          bool // the release in flight is a fast one (fast.go)
	fails            int  // failed scripts in a row
}

// New returns a waiter in state Idle.
func New(cfg Config) *Waiter {
	w := &Waiter{cfg: cfg}
	w.args()
	return w
}

// args fills the scripts' arguments, which change only with the token.
func (w *Waiter) args() {
	c := w.cfg
	w.acquireArgs = [6]string{c.Token, ms(c.TTL), ms(c.Keep), c.ID, "1", ms(c.Alive)}
	w.releaseArgs = [4]string{c.Token, ms(c.Claim), ms(c.Keep), c.ID}
}

// cmd returns the commands cs in the Waiter's buffer.
func (w *Waiter) cmd(cs ...Command) []Command {
	n := copy(w.out[:], cs)
	return w.out[:n]
}

// State is the waiter's state.
func (w *Waiter) State() State { return w.state }

// Keep is how long the waiter's scripts keep the fence counter.
func (w *Waiter) Keep() time.Duration { return w.cfg.Keep }

// Token is the token the waiter's scripts carry now.
func (w *Waiter) Token() string { return w.cfg.Token }

// Step feeds one event and returns the commands it causes.
func (w *Waiter) Step(ev Event) []Command {
	switch w.state {
	case Idle:
		if ev.Kind == Start {
			return w.start(ev.Now)
		}
	case Acquiring:
		return w.stepAcquiring(ev)
	case Queued:
		switch ev.Kind {
		case Wake:
			if w.cfg.Defects.NoConfirm {
				w.state = Held
				return w.cmd(Command{Kind: Grant, Fence: ev.Fence, Lease: w.lease(ev.Now)})
			}
			return w.acquire(ev.Now)
		case Timer:
			if !ev.Now.Before(w.timer) {
				return w.acquire(ev.Now)
			}
		case Handed:
			return w.handed(ev)
		case Cancel:
			if w.cfg.Defects.KeepOnLeave {
				w.state = Done
				return w.cmd(Command{Kind: Fail, Err: ev.Err})
			}
			w.state, w.timer, w.fails = Leaving, time.Time{}, 0
			return w.cmd(Command{Kind: Fail, Err: ev.Err}, w.release())
		}
	case Held:
		if ev.Kind == Unlock {
			w.state = Releasing
			return w.cmd(w.unlock())
		}
	case Releasing:
		if w.fastOut && (ev.Kind == Failed || ev.Kind == Reply && ev.Result.Status == Slow) {
			w.fastOut = false
			return w.cmd(w.release())
		}
		if ev.Kind == Reply || ev.Kind == Failed {
			w.state = Done
		}
	case Leaving:
		return w.stepLeaving(ev)
	}
	return nil
}

// stepLeaving retries a leave until the server answers it, and once more
// after a "not held" while the waiter is unsure.
func (w *Waiter) stepLeaving(ev Event) []Command {
	switch ev.Kind {
	case Reply:
		if ev.Result.Status == NotHeld && w.unsure {
			w.unsure = false
			w.timer = ev.Now.Add(w.cfg.Retry)
			return w.cmd(Command{Kind: WakeAt, At: w.timer})
		}
		w.state = Done
	case Failed:
		w.fails++
		w.timer = ev.Now.Add(w.backoff())
		return w.cmd(Command{Kind: WakeAt, At: w.timer})
	case Timer:
		if !w.timer.IsZero() && !ev.Now.Before(w.timer) {
			w.timer = time.Time{}
			return w.cmd(w.release())
		}
	}
	return nil
}

func (w *Waiter) stepAcquiring(ev Event) []Command {
	switch ev.Kind {
	case Wake, Handed: // the acquire in flight may have run before the hand-off: one more
		w.woken = true
	case Cancel:
		if !w.cancelled {
			w.cancelled = true
			return w.cmd(Command{Kind: Fail, Err: ev.Err})
		}
	case Reply, Failed:
		w.unsure = ev.Kind == Failed
		if w.cancelled {
			if w.cfg.Defects.KeepOnLeave {
				w.state = Done
				return nil
			}
			return w.leave()
		}
		if ev.Kind == Failed {
			if w.cfg.Defects.DropOnLoss {
				w.cfg.Token += "'"
				w.args()
			}
			w.fails++
			return w.wait(ev.Now.Add(w.backoff()))
		}
		w.fails = 0
		switch ev.Result.Status {
		case Granted:
			if !ev.Now.Before(w.lease(w.sent)) {
				return w.acquire(ev.Now)
			}
			w.state = Held
			return w.cmd(Command{Kind: Grant, Fence: ev.Result.Fence, Lease: w.lease(w.sent)})
		case Slow:
			return w.acquire(ev.Now)
		case Enqueued, Taken:
			if w.woken {
				return w.acquire(ev.Now)
			}
			return w.wait(ev.Now.Add(w.cfg.Poll))
		}
	}
	return nil
}

// backoff is the wait after w.fails failures in a row.
func (w *Waiter) backoff() time.Duration {
	d := w.cfg.Retry
	for i := 1; i < w.fails && d < w.cfg.RetryMax; i++ {
		d *= 2
	}
	if w.cfg.RetryMax > 0 {
		d = min(d, w.cfg.RetryMax)
	}
	return d
}

// lease is the end of a lease counted from from, less the drift allowance.
func (w *Waiter) lease(from time.Time) time.Time {
	return from.Add(w.cfg.TTL - time.Duration(float64(w.cfg.TTL)*w.cfg.Drift))
}

func (w *Waiter) acquire(now time.Time) []Command {
	w.state, w.sent, w.woken = Acquiring, now, false
	return w.cmd(Command{Kind: RunAcquire, Args: w.acquireArgs[:]})
}

func (w *Waiter) wait(at time.Time) []Command {
	w.state, w.timer = Queued, at
	return w.cmd(Command{Kind: WakeAt, At: at})
}

// leave gives up: release leaves the line and passes on a grant the waiter
// may hold, for the claim its holder gave it.
func (w *Waiter) leave() []Command {
	w.state, w.timer, w.fails = Leaving, time.Time{}, 0
	return w.cmd(w.release())
}

func (w *Waiter) release() Command {
	return Command{Kind: RunRelease, Args: w.releaseArgs[:]}
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
