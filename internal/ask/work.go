package ask

import "sync"

// Work is a Client's background work: the goroutines its calls run on
// (workers) and the count of calls and cleanups its Close waits for.
// The zero Work runs each call on a goroutine of its own.
type Work struct {
	workers *workers

	// n calls are running, counted under mu; idle is signalled when n
	// reaches 0. closing refuses fresh calls (Begin); drained is set once
	// Drain has seen n reach 0: later work is not waited for.
	mu      sync.Mutex
	idle    sync.Cond
	n       int
	closing bool
	drained bool
}

// NewWork returns the Work of a new Client.
func NewWork() *Work { return &Work{workers: newWorkers()} }

// Spawn runs fn in a goroutine that Drain waits for, also while Drain is
// waiting. Once Drain has returned, the goroutine is not waited for; it
// ends with its Redis call.
func (w *Work) Spawn(fn func()) {
	tracked := w.track(false)
	w.workers.run(func() {
		if tracked {
			defer w.End()
		}
		fn()
	})
}

// Begin registers a call that Drain must wait for, which End ends. It
// reports false (and registers nothing) once Close has begun.
func (w *Work) Begin() bool { return w.track(true) }

// track registers work that Drain must wait for, which End ends: refused
// (false) once Close has begun if fresh (a new call), else once Drain has
// returned.
func (w *Work) track(fresh bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.drained || (fresh && w.closing) {
		return false
	}
	w.n++
	return true
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

// End ends work that Begin registered (once for each that
// reported true).
func (w *Work) End() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n--; w.n == 0 {
		w.idle.Broadcast()
	}
}
