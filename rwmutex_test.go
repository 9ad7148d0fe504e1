package dlock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// Readers share, a writer excludes everyone, and write fences are above
// every earlier grant's.
func TestRWMutexReadersShareAWriterExcludes(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	var readers, writers, mostReaders atomic.Int32
	var last atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := c.RWMutex(k)
			for range 10 {
				if g%4 == 0 {
					l, err := m.Lock(ctxT(t), dlock.WithTTL(10*time.Second))
					if err != nil {
						t.Error(err)
						return
					}
					if writers.Add(1) != 1 || readers.Load() != 0 {
						t.Error("a writer beside another holder")
					}
					if l.Fence() <= last.Load() {
						t.Errorf("write fence %d not above %d", l.Fence(), last.Load())
					}
					last.Store(l.Fence())
					time.Sleep(time.Millisecond)
					writers.Add(-1)
					l.Unlock(ctxT(t))
					continue
				}
				l, err := m.RLock(ctxT(t), dlock.WithTTL(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				n := readers.Add(1)
				if writers.Load() != 0 {
					t.Error("a reader beside a writer")
				}
				for x := mostReaders.Load(); n > x && !mostReaders.CompareAndSwap(x, n); x = mostReaders.Load() {
				}
				if f := l.Fence(); f > last.Load() {
					last.Store(f) // approximately: fences only grow
				}
				time.Sleep(time.Millisecond)
				readers.Add(-1)
				l.Unlock(ctxT(t))
			}
		}()
	}
	wg.Wait()
	if mostReaders.Load() < 2 {
		t.Fatalf("readers never shared: at most %d at once", mostReaders.Load())
	}
}

// A waiting writer is not starved: readers that come after it wait behind
// it.
func TestRWMutexAWaitingWriterIsNotStarved(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	m := c.RWMutex(k)
	r1, err := m.TryRLock(ctxT(t), dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan *dlock.Lock, 1)
	go func() {
		w, err := m.Lock(ctxT(t), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		wrote <- w
	}()
	eventually(t, "writer queued", func() bool { st, _ := c.Inspect(ctxT(t), k); return st.Waiters == 1 })
	if _, err := m.TryRLock(ctxT(t)); err == nil {
		t.Fatal("a new reader overtook the waiting writer")
	}
	readAfter := make(chan *dlock.Lock, 1)
	go func() {
		r, err := m.RLock(ctxT(t), dlock.WithTTL(time.Minute))
		if err != nil {
			t.Error(err)
		}
		readAfter <- r
	}()
	eventually(t, "reader queued", func() bool { st, _ := c.Inspect(ctxT(t), k); return st.Waiters == 2 })
	r1.Unlock(ctxT(t))
	w := <-wrote
	select {
	case <-readAfter:
		t.Fatal("the later reader got in beside the writer")
	case <-time.After(100 * time.Millisecond):
	}
	w.Unlock(ctxT(t))
	r2 := <-readAfter
	if r2 == nil || r2.Fence() <= w.Fence() || w.Fence() <= r1.Fence() {
		t.Fatalf("fences r1 %d, w %v, r2 %v", r1.Fence(), w, r2)
	}
	r2.Unlock(ctxT(t))
}
