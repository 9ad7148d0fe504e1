package wait

import (
	"context"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func cfg() Config {
	return Config{ID: "w1", Token: "tok", TTL: time.Second, Keep: 10 * time.Second, Alive: 600 * time.Millisecond,
		Poll: 200 * time.Millisecond, Claim: 500 * time.Millisecond, Retry: 50 * time.Millisecond}
}

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// A contended lock is acquire (queued), a wake, acquire (confirm), and the
// lease is counted from the confirming acquire's send.
func TestAQueuedWaiterConfirmsTheHandOffAndCountsItsLeaseFromTheSend(t *testing.T) {
	w := New(cfg())
	if c := w.Step(Event{Kind: Start, Now: at(0)}); len(c) != 1 || c[0].Kind != RunAcquire {
		t.Fatalf("start: %+v", c)
	}
	c := w.Step(Event{Kind: Reply, Now: at(5), Result: Result{Status: Enqueued}})
	if len(c) != 1 || c[0].Kind != WakeAt || !c[0].At.Equal(at(205)) || w.State() != Queued {
		t.Fatalf("queued: %+v %v", c, w.State())
	}
	if c := w.Step(Event{Kind: Wake, Now: at(100), Fence: 7}); len(c) != 1 || c[0].Kind != RunAcquire {
		t.Fatalf("wake: %+v", c)
	}
	c = w.Step(Event{Kind: Reply, Now: at(110), Result: Result{Status: Granted, Fence: 7}})
	if len(c) != 1 || c[0].Kind != Grant || c[0].Fence != 7 || !c[0].Lease.Equal(at(1100)) {
		t.Fatalf("grant: %+v", c)
	}
	if c := w.Step(Event{Kind: Unlock, Now: at(300)}); len(c) != 1 || c[0].Kind != RunRelease || w.State() != Releasing {
		t.Fatalf("unlock: %+v", c)
	}
}

// A caller that gives up while its acquire is in flight gets its error at
// once; the waiter releases after the reply, which may have granted it.
func TestAWaiterThatGivesUpInFlightReleasesAfterTheReply(t *testing.T) {
	w := New(cfg())
	w.Step(Event{Kind: Start, Now: at(0)})
	if c := w.Step(Event{Kind: Cancel, Now: at(1), Err: context.Canceled}); len(c) != 1 || c[0].Kind != Fail {
		t.Fatalf("cancel: %+v", c)
	}
	c := w.Step(Event{Kind: Reply, Now: at(2), Result: Result{Status: Granted, Fence: 3}})
	if len(c) != 1 || c[0].Kind != RunRelease || c[0].Args[3] != "w1" || w.State() != Leaving {
		t.Fatalf("after reply: %+v", c)
	}
	// A leave that fails is retried until the server answers it.
	step(t, w, Event{Kind: Failed, Now: at(3)}, WakeAt)
	step(t, w, Event{Kind: Timer, Now: at(100)}, RunRelease)
	w.Step(Event{Kind: Reply, Now: at(101), Result: Result{Status: Released}})
	if w.State() != Done {
		t.Fatal(w.State())
	}
}

// A waiter whose acquire failed unanswered leaves, and looks once more
// after a leave that found nothing: the acquire may run after it.
func TestAnUnsureWaiterLeavesTwice(t *testing.T) {
	w := New(cfg())
	w.Step(Event{Kind: Start, Now: at(0)})
	w.Step(Event{Kind: Cancel, Now: at(1), Err: context.Canceled})
	step(t, w, Event{Kind: Failed, Now: at(2)}, RunRelease)
	step(t, w, Event{Kind: Reply, Now: at(3), Result: Result{Status: NotHeld}}, WakeAt) // unsure: once more
	step(t, w, Event{Kind: Timer, Now: at(60)}, RunRelease)
	w.Step(Event{Kind: Reply, Now: at(61), Result: Result{Status: NotHeld}})
	if w.State() != Done {
		t.Fatal(w.State())
	}
}

// A failed acquire is retried with the same token: a grant it made is
// confirmed by the retry.
func TestAFailedAcquireIsRetriedWithTheSameToken(t *testing.T) {
	w := New(cfg())
	w.Step(Event{Kind: Start, Now: at(0)})
	c := w.Step(Event{Kind: Failed, Now: at(100)})
	if len(c) != 1 || c[0].Kind != WakeAt || !c[0].At.Equal(at(150)) {
		t.Fatalf("failed: %+v", c)
	}
	if c := w.Step(Event{Kind: Timer, Now: at(149)}); c != nil {
		t.Fatalf("early timer: %+v", c)
	}
	c = w.Step(Event{Kind: Timer, Now: at(150)})
	if len(c) != 1 || c[0].Args[0] != "tok" {
		t.Fatalf("retry: %+v", c)
	}
}

// step feeds ev to w and fails unless it returns one command, of kind want.
func step(t *testing.T, w *Waiter, ev Event, want CommandKind) {
	t.Helper()
	if c := w.Step(ev); len(c) != 1 || c[0].Kind != want {
		t.Fatalf("%+v in %v: %+v, want one command of kind %d", ev, w.State(), c, want)
	}
}
