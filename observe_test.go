package dlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
)

// events collects what an Observer receives.
type events struct {
	mu  sync.Mutex
	got []dlock.Event
}

func (e *events) observe(ev dlock.Event) {
	e.mu.Lock()
	e.got = append(e.got, ev)
	e.mu.Unlock()
}

func (e *events) of(kind dlock.EventKind) []dlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []dlock.Event
	for _, ev := range e.got {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

func TestObserverSeesTheLockLifecycle(t *testing.T) {
	c, rdb := newClient(t, shared())
	var evs events
	c.SetObserver(evs.observe)
	k := key(t)

	l := mustLock(t, c, k, dlock.WithTTL(300*time.Millisecond), dlock.WithAutoRenew())
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	eventually(t, "a renewal", func() bool { return len(evs.of(dlock.EventRenew)) > 0 })
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	lost := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	rdb.Set(ctxT(t), k, "someone-else", time.Minute)
	if err := lost.Unlock(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}

	acq := evs.of(dlock.EventAcquire)
	if len(acq) != 3 || acq[0].Err != nil || acq[0].Fence != l.Fence() || !errors.Is(acq[1].Err, dlock.ErrNotObtained) || !acq[1].Contended {
		t.Fatalf("acquire events: %+v", acq)
	}
	if r := evs.of(dlock.EventRenew); r[0].Err != nil || r[0].Key != k {
		t.Fatalf("renew events: %+v", r)
	}
	rel := evs.of(dlock.EventRelease)
	if len(rel) != 2 || rel[0].Err != nil || rel[0].Held <= 0 || !errors.Is(rel[1].Err, dlock.ErrNotHeld) {
		t.Fatalf("release events: %+v", rel)
	}
	eventually(t, "the loss is reported", func() bool {
		ls := evs.of(dlock.EventLost)
		return len(ls) == 1 && errors.Is(ls[0].Err, dlock.ErrLost) && ls[0].Fence == lost.Fence()
	})
	for _, ev := range evs.got {
		if strings.Contains(ev.Key+errText(ev.Err), l.Token()) || strings.Contains(errText(ev.Err), lost.Token()) {
			t.Fatalf("an event carries a token: %+v", ev)
		}
	}
}

// Every event names the primitive, from the options when nothing was
// obtained and from the grant otherwise.
func TestEventsNameThePrimitive(t *testing.T) {
	c, _ := newClient(t, shared())
	var evs events
	c.SetObserver(evs.observe)
	k := key(t)
	sem := c.Semaphore(k, 1)
	l, err := sem.TryAcquire(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctxT(t)); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for _, take := range []func() (*dlock.Lock, error){
		func() (*dlock.Lock, error) { return c.RWMutex(k + ":rw").RLock(ctxT(t)) },
		func() (*dlock.Lock, error) { return c.RWMutex(k + ":rw").Lock(ctxT(t)) },
		func() (*dlock.Lock, error) { return c.Election(k+":e").Campaign(ctxT(t), "me") },
		func() (*dlock.Lock, error) { return c.Lock(ctxT(t), k+":l") },
	} {
		l, err := take()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, ev := range evs.got {
		if ev.Kind != dlock.EventRenew { // the campaign's watchdog may renew
			got = append(got, strings.TrimSuffix(ev.Kind.String()+":"+ev.Primitive+":"+ev.Mode, ":"))
		}
	}
	want := "acquire:semaphore acquire:semaphore release:semaphore acquire:rwmutex:read release:rwmutex:read acquire:rwmutex:write release:rwmutex:write acquire:election release:election acquire:lock release:lock"
	if strings.Join(got, " ") != want {
		t.Fatalf("events:\n got %s\nwant %s", strings.Join(got, " "), want)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestAWaitThatEndsIsObservedAsContended(t *testing.T) {
	c, _ := newClient(t, shared())
	var evs events
	c.SetObserver(evs.observe)
	k := key(t)
	mustLock(t, c, k, dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _ = c.Lock(ctx, k)
	acq := evs.of(dlock.EventAcquire)
	if last := acq[len(acq)-1]; !last.Contended || !errors.Is(last.Err, context.DeadlineExceeded) || last.Wait < 50*time.Millisecond {
		t.Fatalf("the ended wait was reported as %+v", last)
	}
}

func TestTheLoggerReportsALossWithoutTheToken(t *testing.T) {
	c, rdb := newClient(t, shared())
	var buf syncBuffer
	c.SetLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	rdb.Set(ctxT(t), k, "someone-else", time.Minute)
	if _, err := l.TTL(ctxT(t)); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
	eventually(t, "the loss is logged", func() bool { return strings.Contains(buf.String(), "lock lost") })
	if out := buf.String(); !strings.Contains(out, k) || strings.Contains(out, l.Token()) {
		t.Fatalf("log: %s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Observers feeds several observers; each sees every event, with the
// node count, the nodes that answered and Outcome's word for it.
func TestSeveralObserversSeeEveryEvent(t *testing.T) {
	c, _ := newClient(t, shared())
	var a, b events
	c.SetObserver(dlock.Observers(a.observe, nil, b.observe))
	k := key(t)
	l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
	if _, err := c.TryLock(ctxT(t), k); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if err := l.Unlock(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctxT(t), k, dlock.WithTTL(time.Nanosecond)); !errors.Is(err, dlock.ErrInvalidArgument) {
		t.Fatal(err)
	}
	for _, evs := range []*events{&a, &b} {
		var got []string
		for _, ev := range evs.got {
			got = append(got, ev.Kind.String()+":"+ev.Outcome())
			if ev.Nodes != 1 {
				t.Errorf("%v event with Nodes %d", ev.Kind, ev.Nodes)
			}
		}
		want := []string{"acquire:obtained", "acquire:contended", "release:ok", "acquire:error"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("events %v, want %v", got, want)
		}
		acq := evs.of(dlock.EventAcquire)
		if len(acq[0].Answered) != 1 || acq[0].Answered[0] != 0 || len(acq[1].Answered) != 1 {
			t.Errorf("answered %v and %v, want [0] twice", acq[0].Answered, acq[1].Answered)
		}
	}
}

// countingTracer counts the spans it is asked to start and end.
type countingTracer struct{ started, ended atomic.Int64 }

func (t *countingTracer) Start(ctx context.Context, _ dlock.SpanKind, _, _ string) (context.Context, func(dlock.Event)) {
	t.started.Add(1)
	return ctx, func(dlock.Event) { t.ended.Add(1) }
}

// The observer and the tracer are set and cleared independently.
func TestObserverAndTracerAreSetApart(t *testing.T) {
	c, _ := newClient(t, shared())
	k := key(t)
	var tr countingTracer
	var evs events
	cycle := func() {
		t.Helper()
		l := mustLock(t, c, k, dlock.WithTTL(time.Minute))
		if err := l.Unlock(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	c.SetTracer(&tr)
	c.SetObserver(evs.observe)
	c.SetObserver(nil) // the tracer stays
	cycle()
	if tr.started.Load() != 3 || tr.ended.Load() != 3 || len(evs.got) != 0 {
		t.Fatalf("spans %d started %d ended, %d events; want acquire, hold and release spans, no events", tr.started.Load(), tr.ended.Load(), len(evs.got))
	}
	c.SetObserver(evs.observe)
	c.SetTracer(nil) // the observer stays
	cycle()
	if tr.started.Load() != 3 || len(evs.got) != 2 {
		t.Fatalf("spans %d, events %d after the tracer was removed; want 3 and 2", tr.started.Load(), len(evs.got))
	}
}
