package ask

import (
	"bytes"
	"runtime"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// goroutineID is the running goroutine's number, from its stack header.
func goroutineID() string {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	id, _, _ := bytes.Cut(bytes.TrimPrefix(b, []byte("goroutine ")), []byte(" "))
	return string(id)
}

// idleWorkers waits until n workers are idle.
func idleWorkers(t *testing.T, w *workers, n int32) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); w.idle.Load() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers idle, want %d", w.idle.Load(), n)
		}
	}
}

func TestAWorkerRunsTheNextCallsOnItsGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := newWorkers()
	defer w.stop()
	ids := make(chan string, 1)
	seen := map[string]bool{}
	const calls = 50
	for range calls {
		w.run(func() { ids <- goroutineID() })
		seen[<-ids] = true
		idleWorkers(t, w, int32(len(seen))) // each worker that ran one waits for the next
	}
	// A call that comes while its worker is between calls (counted idle, not yet
	// waiting) starts another; most find the one waiting.
	if len(seen) > calls/5 {
		t.Fatalf("%d sequential calls ran on %d goroutines: the workers are not reused", calls, len(seen))
	}
}

func TestStopEndsTheWorkersAndLaterCallsStillRun(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := newWorkers()
	var wg sync.WaitGroup
	for range 3 * maxIdle { // more at once than may stay idle
		wg.Add(1)
		w.run(func() { time.Sleep(time.Millisecond); wg.Done() })
	}
	wg.Wait()
	if n := w.idle.Load(); n > maxIdle {
		t.Fatalf("%d workers idle, more than %d", n, maxIdle)
	}
	w.stop()
	if n := w.idle.Load(); n != 0 {
		t.Fatalf("%d workers idle after stop", n)
	}
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a call after stop never ran")
	}
}

func TestAnIdleWorkerEndsOnItsOwn(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	w := newWorkers() // never stopped, as in a Client never closed
	w.run(func() {})
	idleWorkers(t, w, 1)
	idleWorkers(t, w, 0) // after idleFor
	w.wg.Wait()
}
