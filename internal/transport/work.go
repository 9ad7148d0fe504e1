package transport

import "sync"

// Work is a Client's background work: the goroutines its calls run on
// (workers) and the count of calls and cleanups its Close waits for.
// The zero Work runs each call on a goroutine of its own.
type Work struct {
	workers *workers

	// n calls are running, counted under mu; idle is signalled when n
	// reaches 0. closing refuses fresh calls (Begin); drained is set once
	// Drain has seen n reach 0: later work is not waited for.
	mu       sync.Mutex
	idle     sync.Cond
	n        int
	closing  bool
	drained  bool
	untrackF func() // ends a tracked call: made once, as a method value costs an allocation
}

// NewWork returns the Work of a new Client.
func NewWork() *Work {
	w := &Work{workers: newWorkers()}
	w.untrackF = w.untrack
	return w
}

// Spawn runs fn in a goroutine that Drain waits for, also while Drain is
// waiting. Once Drain has returned, the goroutine is not waited for; it
// ends with its Redis call.
func (w *Work) Spawn(fn func()) {
	done, tracked := w.Track(false)
	w.workers.run(func() {
		if tracked {
			defer done()
		}
		fn()
	})
}

// Begin registers a call that Drain must wait for; done ends it. ok is
// false (and nothing is registered) once Close has begun.
func (w *Work) Begin() (done func(), ok bool) { return w.Track(true) }

// Track registers work that Drain must wait for: refused once Close has
// begun if fresh (a new call), else once Drain has returned.
func (w *Work) Track(fresh bool) (done func(), ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drained || (fresh && w.closing) {
		return nil, false
	}
	w.n++
	if w.untrackF == nil { // a zero Work
		return w.untrack, true
	}
	return w.untrackF, true
}

// Close refuses fresh calls from now on.
func (w *Work) Close() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
}

// Drain waits until no tracked work runs (work started meanwhile
// included), refuses any more, and ends the idle workers.
func (w *Work) Drain() {
	w.wait(true)
	w.workers.stop()
}

// Wait waits until no tracked work runs.
func (w *Work) Wait() { w.wait(false) }

// wait waits until no tracked work runs; drain then refuses any more.
func (w *Work) wait(drain bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle.L == nil {
		w.idle.L = &w.mu
	}
	for w.n > 0 {
		w.idle.Wait()
	}
	w.drained = w.drained || drain
}

// untrack ends a call that Track registered.
func (w *Work) untrack() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n--; w.n == 0 {
		w.idle.Broadcast()
	}
}
