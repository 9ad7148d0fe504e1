package sim

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

var redlockSeed = flag.Uint64("redlock-seed", 0, "replay this Redlock seed alone, printing its event log (with -defect k: the defect)")

func redlockConfig(seed uint64, defect string) RedlockConfig {
	c := DefaultRedlock(seed)
	c.Minority = defect == "k"
	c.Defects.LastFirst = defect == "l"
	return c
}

func runRedlock(t *testing.T, c RedlockConfig) *Redlock {
	t.Helper()
	s, err := NewRedlock(c)
	if err != nil {
		t.Fatal(err)
	}
	s.Run()
	return s
}

// The listening wait (Redlock) keeps its invariants under every seed; a
// failing seed prints the command that replays it.
func TestRedlockSeeds(t *testing.T) {
	if *redlockSeed != 0 {
		s := runRedlock(t, redlockConfig(*redlockSeed, *defect))
		fmt.Fprint(os.Stdout, s.Log())
		if s.violation != "" {
			t.Fatalf("seed %d: %s", *redlockSeed, s.violation)
		}
		return
	}
	start, n, scripts, grants := time.Now(), max(*seeds/3, 10), 0, 0
	for i := 1; i <= n; i++ {
		s := runRedlock(t, DefaultRedlock(uint64(i)))
		if s.violation != "" {
			t.Fatalf("seed %d: %s\nreplay: go test ./sim -run 'TestRedlockSeeds$' -redlock-seed %d -v\n...\n%s", i, s.violation, i, tail(s.Log(), 30))
		}
		scripts, grants = scripts+s.Scripts, grants+s.Grants
	}
	d := time.Since(start)
	t.Logf("%d seeds in %v (%.1f seeds/s; %d grants, %d scripts)", n, d.Round(time.Millisecond), float64(n)/d.Seconds(), grants, scripts)
}

// The same seed gives the same history, byte for byte.
func TestTheSameRedlockSeedGivesTheSameHistory(t *testing.T) {
	a, b := runRedlock(t, DefaultRedlock(7)), runRedlock(t, DefaultRedlock(7))
	if a.Log() != b.Log() {
		t.Fatal("two runs of seed 7 differ")
	}
}

// The Redlock simulator finds each of its defects: k, a grant judged by a
// minority of the nodes (the attempt's judgement), and l, a turn passed on
// to the last in line (the Line's).
func TestTheRedlockSimulatorFindsEachDefect(t *testing.T) {
	for _, d := range []struct{ name, what string }{
		{"k", "a grant judged by a minority of the nodes"},
		{"l", "a turn passed on to the last in line, not the first"},
	} {
		caught := 0
		for i := 1; i <= *maxSeed && caught == 0; i++ {
			if s := runRedlock(t, redlockConfig(uint64(i), d.name)); s.violation != "" {
				caught = i
				t.Logf("defect %s (%s): caught by seed %d: %s\nreplay: go test ./sim -run 'TestRedlockSeeds$' -redlock-seed %d -defect %s -v", d.name, d.what, i, s.violation, i, d.name)
			}
		}
		if caught == 0 {
			t.Errorf("defect %s (%s): not caught within %d seeds", d.name, d.what, *maxSeed)
		}
	}
}
