package ask

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers runs a Client's background calls (spawn) on goroutines that stay
// for the next call instead of ending with each.
//
// Why: every call a Redlock round puts to a node, and every call whose
// caller's context can end (calls.go), runs in a goroutine of its own. A new
// goroutine starts on a small stack, and go-redis's call path is deep: the
// stack is grown and copied on every call. A goroutine that has run one
// call keeps its grown stack for the next (docs/design.md,
// "Measurements").
//
// A call goes to an idle worker if one is waiting, else to a new one; a
// worker that finishes waits for the next call while fewer than maxIdle
// others wait, and otherwise ends; it also ends when no call has come for
// idleFor, so that a quiet Client, or one never closed, keeps none. Close
// ends the idle workers and waits for them; after Close, calls run on
// goroutines of their own.
type workers struct {
	jobs chan func()   // unbuffered: a send succeeds only if an idle worker takes it
	quit chan struct{} // closed by stop
	idle atomic.Int32  // workers waiting for a call
	done atomic.Bool   // stop has begun: calls go to goroutines of their own (set under mu)
	wg   sync.WaitGroup
	mu   sync.Mutex // orders a worker's wg.Add before stop's wg.Wait
}

// maxIdle is how many workers may wait for calls at once: about the
// number of calls a busy Client has in flight at a time, so that a burst
// beyond it (a herd) does not leave its goroutines behind.
const maxIdle = 64

// idleFor is how long a worker waits for its next call.
const idleFor = time.Second

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), quit: make(chan struct{})}
}

// run runs fn on an idle worker, or on a new goroutine (always, on a nil
// *workers: a Client not made by New).
func (w *workers) run(fn func()) {
	if w == nil {
		go fn()
		return
	}
	if !w.done.Load() {
		select {
		case w.jobs <- fn:
			return
		default:
		}
	}
	w.mu.Lock()
	if w.done.Load() {
		w.mu.Unlock()
		go fn()
		return
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.work(fn)
}

// work runs fn, then the calls that come while it waits, until there are
// enough idle workers or stop.
func (w *workers) work(fn func()) {
	defer w.wg.Done()
	var idle *time.Timer
	for {
		fn()
		if !w.park() {
			return
		}
		if idle == nil {
			idle = time.NewTimer(idleFor)
		} else {
			idle.Reset(idleFor)
		}
		select {
		case fn = <-w.jobs:
			w.idle.Add(-1)
		case <-idle.C:
			w.idle.Add(-1)
			return
		case <-w.quit:
			w.idle.Add(-1)
			idle.Stop()
			return
		}
	}
}

// park counts the calling worker idle, unless maxIdle already are.
func (w *workers) park() bool {
	for {
		n := w.idle.Load()
		if n >= maxIdle {
			return false
		}
		if w.idle.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// stop ends the idle workers, and waits for every worker to end: those
// running a call end when it does.
func (w *workers) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	if !w.done.Swap(true) {
		close(w.quit)
	}
	w.mu.Unlock()
	w.wg.Wait()
}
