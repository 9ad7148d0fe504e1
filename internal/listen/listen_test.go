package listen

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// want fails unless got is exactly the commands listed.
func want(t *testing.T, step string, got []Command, cmds ...Command) {
	t.Helper()
	if len(got) == 0 && len(cmds) == 0 {
		return
	}
	if !reflect.DeepEqual(got, cmds) {
		t.Fatalf("%s: commands %v, want %v", step, got, cmds)
	}
}

// subscribed returns a line of nodes nodes whose first call, 1, has its
// turn, subscribed on every node and attempting.
func subscribed(t *testing.T, nodes int) *Line {
	t.Helper()
	l := New(nodes)
	want(t, "enter", l.Step(Event{Kind: Enter, ID: 1, Now: t0}),
		Command{Kind: Subscribe}, Command{Kind: Timer, ID: 1, At: at(MinWait)})
	for i := range nodes - 1 {
		want(t, "ready", l.Step(Event{Kind: Ready, Node: i, Now: t0}))
	}
	want(t, "all ready", l.Step(Event{Kind: Ready, Node: nodes - 1, Now: t0}), Command{Kind: Attempt, ID: 1})
	return l
}

func TestTurnsAreTakenInArrivalOrder(t *testing.T) {
	l := subscribed(t, 3)
	want(t, "2 enters", l.Step(Event{Kind: Enter, ID: 2, Now: t0}))
	want(t, "3 enters", l.Step(Event{Kind: Enter, ID: 3, Now: t0}))
	want(t, "1 fails for good", l.Step(Event{Kind: Result, ID: 1, Outcome: Final, Now: t0}),
		Command{Kind: Return, ID: 1}, Command{Kind: Attempt, ID: 2})
	want(t, "3 leaves", l.Step(Event{Kind: Leave, ID: 3, Now: t0}))
	want(t, "2 obtains", l.Step(Event{Kind: Result, ID: 2, Outcome: Granted, Until: at(time.Minute), Now: t0}),
		Command{Kind: Return, ID: 2}, Command{Kind: Unsubscribe})
	if !l.Empty() {
		t.Fatal("the line is not empty")
	}
}

func TestAMajorityOfReleasesWakesTheTurn(t *testing.T) {
	l := subscribed(t, 3)
	want(t, "taken", l.Step(Event{Kind: Result, ID: 1, Outcome: Taken, Now: t0, Rand: 0}),
		Command{Kind: Timer, ID: 1, At: at(MinWait / 2)})
	want(t, "one release", l.Step(Event{Kind: Released, Node: 0, Now: t0}))
	want(t, "the same node again", l.Step(Event{Kind: Released, Node: 0, Now: t0}))
	want(t, "a majority", l.Step(Event{Kind: Released, Node: 2, Now: t0}), Command{Kind: Attempt, ID: 1})
}

func TestAReleaseDuringTheAttemptWakesTheWaitAfterIt(t *testing.T) {
	l := subscribed(t, 3)
	l.Step(Event{Kind: Released, Node: 0, Now: t0})
	l.Step(Event{Kind: Released, Node: 1, Now: t0})
	want(t, "taken, woken", l.Step(Event{Kind: Result, ID: 1, Outcome: Taken, Now: t0}), Command{Kind: Attempt, ID: 1})
	// The marks were cleared as that attempt began: one more is not a majority.
	want(t, "taken", l.Step(Event{Kind: Result, ID: 1, Outcome: Taken, Now: t0}),
		Command{Kind: Timer, ID: 1, At: at(MinWait / 2)})
	want(t, "one release", l.Step(Event{Kind: Released, Node: 2, Now: t0}))
}

func TestTheTimerDoublesTheWaitUpToMaxWait(t *testing.T) {
	l := subscribed(t, 1)
	now, wait := t0, MinWait
	for range 10 {
		cmds := l.Step(Event{Kind: Result, ID: 1, Outcome: Taken, Now: now, Rand: 0})
		want(t, "taken", cmds, Command{Kind: Timer, ID: 1, At: now.Add(wait / 2)})
		want(t, "early tick", l.Step(Event{Kind: Tick, Now: now}))
		now = now.Add(wait / 2)
		want(t, "tick", l.Step(Event{Kind: Tick, Now: now}), Command{Kind: Attempt, ID: 1})
		wait = min(2*wait, MaxWait)
	}
	if l.wait != MaxWait {
		t.Fatalf("the wait is %v after ten timers, want %v", l.wait, MaxWait)
	}
}

func TestASplitPausesAfterTheRelease(t *testing.T) {
	l := subscribed(t, 1)
	l.Step(Event{Kind: Result, ID: 1, Outcome: Split, Now: t0})
	want(t, "released", l.Step(Event{Kind: Released, Node: 0, Now: t0, Rand: 5}),
		Command{Kind: Timer, ID: 1, At: at(5)})
	want(t, "paused", l.Step(Event{Kind: Tick, Now: at(5)}), Command{Kind: Attempt, ID: 1})
}

func TestATurnPassedOnByAHolderWaitsForItsRelease(t *testing.T) {
	l := subscribed(t, 3)
	l.Step(Event{Kind: Enter, ID: 2, Now: t0})
	want(t, "1 obtains", l.Step(Event{Kind: Result, ID: 1, Outcome: Granted, Until: at(time.Minute), Now: t0}),
		Command{Kind: Return, ID: 1}, Command{Kind: Timer, ID: 2, At: at(MaxWait)})
	want(t, "one node's release", l.Step(Event{Kind: Released, Node: 0, Now: t0}))
	want(t, "freed", l.Step(Event{Kind: Freed, Now: t0}), Command{Kind: Attempt, ID: 2})

	// A majority's release messages end the wait too: the key was released
	// (a revoke, an Unlock whose replies were lost), whoever held it.
	l.Step(Event{Kind: Enter, ID: 3, Now: t0})
	l.Step(Event{Kind: Result, ID: 2, Outcome: Granted, Until: at(time.Minute), Now: t0})
	l.Step(Event{Kind: Released, Node: 1, Now: t0})
	want(t, "a majority released", l.Step(Event{Kind: Released, Node: 2, Now: t0}), Command{Kind: Attempt, ID: 3})

	// Without a word, the turn looks after MaxWait, then every MaxWait or so.
	l.Step(Event{Kind: Enter, ID: 4, Now: t0})
	l.Step(Event{Kind: Result, ID: 3, Outcome: Granted, Until: at(time.Minute), Now: t0})
	want(t, "MaxWait", l.Step(Event{Kind: Tick, Now: at(MaxWait)}), Command{Kind: Attempt, ID: 4})
	want(t, "taken", l.Step(Event{Kind: Result, ID: 4, Outcome: Taken, Now: at(MaxWait), Rand: 0}),
		Command{Kind: Timer, ID: 4, At: at(MaxWait + MaxWait/2)})
	want(t, "freed while waiting", l.Step(Event{Kind: Freed, Now: at(MaxWait)}), Command{Kind: Attempt, ID: 4})

	// A short lease: its end starts the attempt.
	l.Step(Event{Kind: Enter, ID: 5, Now: t0})
	want(t, "a short lease", l.Step(Event{Kind: Result, ID: 4, Outcome: Granted, Until: at(2 * MaxWait), Now: at(MaxWait + MaxWait/2)}),
		Command{Kind: Return, ID: 4}, Command{Kind: Timer, ID: 5, At: at(2 * MaxWait)})
	want(t, "lease over", l.Step(Event{Kind: Tick, Now: at(2 * MaxWait)}), Command{Kind: Attempt, ID: 5})
	if l.wait != MinWait {
		t.Fatalf("after the holder's lease ended the wait is %v, want %v", l.wait, MinWait)
	}
}

func TestAnUnconfirmedSubscriptionDelaysTheFirstAttemptAtMostMinWait(t *testing.T) {
	l := New(3)
	l.Step(Event{Kind: Enter, ID: 1, Now: t0})
	l.Step(Event{Kind: Ready, Node: 0, Now: t0})
	want(t, "early tick", l.Step(Event{Kind: Tick, Now: at(MinWait - 1)}))
	want(t, "tick", l.Step(Event{Kind: Tick, Now: at(MinWait)}), Command{Kind: Attempt, ID: 1})
	want(t, "the rest ready: already attempting", l.Step(Event{Kind: Ready, Node: 1, Now: at(MinWait)}))
}

func TestLeavingPassesTheTurnInAnyState(t *testing.T) {
	for _, state := range []string{"subscribing", "holding", "attempting", "waiting", "pausing"} {
		t.Run(state, func(t *testing.T) {
			l := New(1)
			l.Step(Event{Kind: Enter, ID: 1, Now: t0})
			l.Step(Event{Kind: Enter, ID: 2, Now: t0})
			next := Command{Kind: Attempt, ID: 2}
			switch state {
			case "subscribing":
				next = Command{Kind: Timer, ID: 2, At: at(MinWait)}
			case "holding":
				l.Step(Event{Kind: Ready, Node: 0, Now: t0})
				l.Step(Event{Kind: Enter, ID: 9, Now: t0})
				l.Step(Event{Kind: Result, ID: 1, Outcome: Granted, Until: at(time.Minute), Now: t0})
				l.Step(Event{Kind: Leave, ID: 9, Now: t0}) // 9 is not in line any more: it had gone first
				// 2 holds now, waiting for 1's release; 2 leaves, the holder is still there.
				l.Step(Event{Kind: Enter, ID: 3, Now: t0})
				want(t, "leave", l.Step(Event{Kind: Leave, ID: 2, Now: t0}), Command{Kind: Timer, ID: 3, At: at(MaxWait)})
				return
			case "waiting":
				l.Step(Event{Kind: Ready, Node: 0, Now: t0})
				l.Step(Event{Kind: Result, ID: 1, Outcome: Taken, Now: t0})
			case "pausing":
				l.Step(Event{Kind: Ready, Node: 0, Now: t0})
				l.Step(Event{Kind: Result, ID: 1, Outcome: Split, Now: t0})
				l.Step(Event{Kind: Released, Node: 0, Now: t0, Rand: 3})
			case "attempting":
				l.Step(Event{Kind: Ready, Node: 0, Now: t0})
			}
			want(t, "leave", l.Step(Event{Kind: Leave, ID: 1, Now: t0}), next)
			want(t, "a late result of the one that left", l.Step(Event{Kind: Result, ID: 1, Outcome: Granted, Now: t0}))
			want(t, "the last leaves", l.Step(Event{Kind: Leave, ID: 2, Now: t0}), Command{Kind: Unsubscribe})
		})
	}
}

func TestDelayIsJitteredAndFollowsAShortHolder(t *testing.T) {
	for _, r := range []uint64{0, 1, 1 << 20, 1<<64 - 1} {
		if d := Delay(time.Second, 0, r); d < time.Second/2 || d > time.Second {
			t.Fatalf("Delay(1s, none, %d) = %v", r, d)
		}
		if d := Delay(time.Second, 100*time.Millisecond, r); d < 100*time.Millisecond || d > 100*time.Millisecond+time.Second/8 {
			t.Fatalf("Delay(1s, 100ms, %d) = %v", r, d)
		}
	}
}

// Random events never give the turn to two calls, never make a call that
// is not first in line attempt, and leave no line behind once all left.
func TestRandomEventsKeepOneTurn(t *testing.T) {
	for seed := range uint64(200) {
		r := seed*6364136223846793005 + 1442695040888963407
		next := func(n uint64) uint64 { r = r*6364136223846793005 + 1442695040888963407; return (r >> 33) % n }
		l := New(3)
		now := t0
		in := map[ID]bool{}
		attempting := ID(0)
		var id ID
		for step := range 300 {
			now = now.Add(time.Duration(next(20)) * time.Millisecond)
			var ev Event
			switch k := next(7); {
			case k == 0 || len(in) == 0:
				id++
				ev = Event{Kind: Enter, ID: id}
				in[id] = true
			case k == 1:
				ev = Event{Kind: Leave, ID: ID(next(uint64(id)) + 1)}
			case k == 2:
				ev = Event{Kind: Ready, Node: int(next(3))}
			case k == 3:
				ev = Event{Kind: Released, Node: int(next(3))}
			case k == 4:
				ev = Event{Kind: Freed}
			case k == 5:
				ev = Event{Kind: Tick}
			default:
				ev = Event{Kind: Result, ID: attempting, Outcome: Outcome(next(4)), Until: now.Add(time.Second)}
			}
			ev.Now, ev.Rand = now, next(1<<32)
			if ev.Kind == Leave || (ev.Kind == Result && attempting != 0 && ev.Outcome != Taken && ev.Outcome != Split) {
				delete(in, ev.ID)
			}
			if ev.Kind == Result || ev.ID == attempting { // the attempt ended, or its call left
				attempting = 0
			}
			for _, c := range l.Step(ev) {
				switch c.Kind {
				case Attempt:
					if attempting != 0 && attempting != c.ID {
						t.Fatalf("seed %d step %d: %d attempts while %d does", seed, step, c.ID, attempting)
					}
					if len(l.queue) == 0 || l.queue[0] != c.ID || !in[c.ID] {
						t.Fatalf("seed %d step %d: %d attempts out of turn (line %v)", seed, step, c.ID, l.queue)
					}
					attempting = c.ID
				case Unsubscribe:
					if len(in) != 0 {
						t.Fatalf("seed %d step %d: the line ended with %v in it", seed, step, in)
					}
				}
			}
			if fmt.Sprint(len(l.queue)) != fmt.Sprint(len(in)) {
				t.Fatalf("seed %d step %d: %d in line, %d waiting", seed, step, len(l.queue), len(in))
			}
		}
	}
}
