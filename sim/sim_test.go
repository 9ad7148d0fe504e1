package sim

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

var (
	seeds   = flag.Int("seeds", 60, "how many seeds TestSeeds runs")
	seed    = flag.Uint64("seed", 0, "replay this seed alone, printing its event log")
	maxSeed = flag.Int("defect-seeds", 300, "the seeds a defect must be caught within")
	defect  = flag.String("defect", "", "with -seed: reintroduce defect a to j (with -redlock-seed: k or l)")
	shared  = flag.String("shared", "", "with -seed: shared holds (Config.Shared: s3, rw)")
)

// defects are the test-only switches, by name.
var defects = []struct {
	name, what string
	set        func(*Config)
}{
	{"a", "a hand-off returns with the claim's lease, unconfirmed", func(c *Config) { c.Defects.NoConfirm = true }},
	{"b", "a waiter that gave up keeps its grant, claimed long", func(c *Config) { c.Defects.KeepOnLeave, c.LongClaim = true, true }},
	{"c", "a grant is thrown away after a lost reply", func(c *Config) { c.Defects.DropOnLoss = true }},
	{"d", "the line is served last arrival first", func(c *Config) { c.LastFirst = true }},
	{"e", "the resource takes a stale holder's write (no guard)", func(c *Config) { c.Unguarded = true }},
	{"f", "a handover's lease counts from its delivery", func(c *Config) { c.Defects.LateLease = true }},
	{"g", "a semaphore of 2 grants a permit too many", func(c *Config) { c.LooseFit, c.Shared = true, "s2" }},
	{"h", "a read-write lock lets a reader in beside a writer", func(c *Config) { c.LooseFit, c.Shared = true, "rw" }},
	{"i", "a handover whose reply is lost lapses under a short TTL", func(c *Config) { c.BareHandover, c.TTL = true, c.Poll/2 }},
	{"j", "the fast acquire takes a free key without looking for a line", func(c *Config) { c.FastBlind = true }},
}

func config(seed uint64, defect string) Config {
	c := Default(seed)
	c.Shared = *shared
	for _, d := range defects {
		if d.name == defect {
			d.set(&c)
		}
	}
	return c
}

// A run of every seed keeps the invariants; a failing seed prints the
// command that replays it and the end of its event log.
func TestSeeds(t *testing.T) {
	if *seed != 0 {
		c := config(*seed, *defect)
		c.PictureDir = os.TempDir() // a replay draws a history Porcupine rejects
		s := New(c)
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
	for _, d := range defects {
		caught := 0
		for i := 1; i <= *maxSeed && caught == 0; i++ {
			if v := New(config(uint64(i), d.name)).Run(); v != "" {
				caught = i
				t.Logf("defect %s (%s): caught by seed %d: %s\nreplay: go test ./sim -run 'TestSeeds$' -seed %d -defect %s -v", d.name, d.what, i, v, i, d.name)
			}
		}
		if caught == 0 {
			t.Errorf("defect %s (%s): not caught within %d seeds", d.name, d.what, *maxSeed)
		}
	}
}

// Without faults or keepalives, an uncontended lock and unlock is 2
// scripts and a contended one at most 3 (acquire that queues, the holder's
// release that hands off, acquire that confirms).
func TestScriptsPerLock(t *testing.T) {
	for _, workers := range []int{1, 4} {
		cfg := Default(5)
		cfg.NoFaults, cfg.Clients, cfg.Workers = true, 1, workers
		cfg.Poll, cfg.Alive, cfg.Claim = 20*time.Second, 60*time.Second, 30*time.Second
		cfg.StallBound = 2 * time.Minute
		s := New(cfg)
		if v := s.Run(); v != "" {
			t.Fatal(v)
		}
		perLock := float64(s.Scripts) / float64(s.Grants)
		t.Logf("%d callers: %d grants, %d scripts, %.2f a lock", workers, s.Grants, s.Scripts, perLock)
		if workers == 1 && s.Scripts != 2*s.Grants || perLock > 3 {
			t.Errorf("%d callers: %.2f scripts a lock", workers, perLock)
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

// Shared holds keep their invariants too: a semaphore's permits, and a
// read-write lock's writer alone.
func TestSeedsOfSharedHolds(t *testing.T) {
	for _, kind := range []string{"s3", "s1", "rw"} {
		start, n := time.Now(), max(*seeds/3, 10)
		for i := 1; i <= n; i++ {
			c := Default(uint64(i))
			c.Shared = kind
			s := New(c)
			if v := s.Run(); v != "" {
				t.Fatalf("%s, seed %d: %s\nreplay: go test ./sim -run 'TestSeeds$' -seed %d -shared %s -v\n...\n%s", kind, i, v, i, kind, tail(s.Log(), 30))
			}
		}
		t.Logf("%s: %d seeds in %v", kind, n, time.Since(start).Round(time.Millisecond))
	}
}

// A TTL under the keepalive's period: a lease may end before the waiter's
// next acquire, so whatever the protocol leaves to that acquire (a
// handover whose reply was lost, say) must not depend on the lease.
func TestSeedsWithATTLUnderThePoll(t *testing.T) {
	n := max(*seeds/3, 10)
	for i := 1; i <= n; i++ {
		c := Default(uint64(i))
		c.TTL = c.Poll / 2
		s := New(c)
		if v := s.Run(); v != "" {
			t.Fatalf("seed %d: %s\n...\n%s", i, v, tail(s.Log(), 30))
		}
	}
}
