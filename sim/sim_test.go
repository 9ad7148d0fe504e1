package sim

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/wait"
)

var (
	seeds   = flag.Int("seeds", 60, "how many seeds TestSeeds runs")
	seed    = flag.Uint64("seed", 0, "replay this seed alone, printing its event log")
	maxSeed = flag.Int("defect-seeds", 300, "the seeds a defect must be caught within")
)

// A run of every seed keeps the invariants; a failing seed prints the
// command that replays it and the end of its event log.
func TestSeeds(t *testing.T) {
	if *seed != 0 {
		s := New(Default(*seed))
		v := s.Run()
		fmt.Fprint(os.Stdout, s.Log())
		if v != "" {
			t.Fatalf("seed %d: %s", *seed, v)
		}
		return
	}
	start, scripts := time.Now(), 0
	for i := 1; i <= *seeds; i++ {
		s := New(Default(uint64(i)))
		if v := s.Run(); v != "" {
			t.Fatalf("seed %d: %s\nreplay: go test ./sim -run 'TestSeeds$' -seed %d -v\n...\n%s", i, v, i, tail(s.Log(), 30))
		}
		scripts += s.Scripts
	}
	d := time.Since(start)
	t.Logf("%d seeds in %v (%.1f seeds/s, %d scripts)", *seeds, d.Round(time.Millisecond), float64(*seeds)/d.Seconds(), scripts)
}

// The same seed gives the same history, byte for byte.
func TestTheSameSeedGivesTheSameHistory(t *testing.T) {
	for _, n := range []uint64{3, 17} {
		a, b := New(Default(n)), New(Default(n))
		a.Run()
		b.Run()
		if a.Log() != b.Log() {
			t.Fatalf("seed %d: two runs differ", n)
		}
	}
}

// The simulator finds each defect reintroduced behind a test-only switch,
// within a bound of seeds.
func TestTheSimulatorFindsEachDefect(t *testing.T) {
	for _, d := range []struct {
		name string
		set  func(*Config)
	}{
		{"a: a hand-off returns with the claim's lease, unconfirmed", func(c *Config) { c.Defects.NoConfirm = true }},
		{"b: a waiter that gave up keeps its grant, claimed long", func(c *Config) { c.Defects.KeepOnLeave, c.LongClaim = true, true }},
		{"c: a grant is thrown away after a lost reply", func(c *Config) { c.Defects.DropOnLoss = true }},
	} {
		caught := 0
		for i := 1; i <= *maxSeed && caught == 0; i++ {
			cfg := Default(uint64(i))
			d.set(&cfg)
			if v := New(cfg).Run(); v != "" {
				caught = i
				t.Logf("defect %s: caught by seed %d: %s", d.name, i, v)
			}
		}
		if caught == 0 {
			t.Errorf("defect %s: not caught within %d seeds", d.name, *maxSeed)
		}
	}
}

func tail(s string, n int) string {
	for i := len(s) - 2; i >= 0; i-- {
		if s[i] == '\n' {
			if n--; n == 0 {
				return s[i+1:]
			}
		}
	}
	return s
}

var _ = wait.Defects{}
