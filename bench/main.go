// Command bench compares dlock with bsm/redislock, go-redsync/redsync and
// rueidis/rueidislock on the same redis-server processes, which it starts on
// loopback and stops, and writes BENCHMARKS.md with a table and an SVG chart.
//
//	cd bench && go run . -out ../BENCHMARKS.md
//
// It is a separate module so that the peers never become dependencies of
// dlock itself.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/internal/redistest"
)

var (
	duration = flag.Duration("duration", 3*time.Second, "how long each contended scenario runs")
	cycles   = flag.Int("cycles", 5000, "lock+unlock cycles in each uncontended scenario")
	out      = flag.String("out", "BENCHMARKS.md", "where to write the report")
	chart    = flag.String("chart", "benchmarks.svg", "where to write the chart (next to the report)")
)

// result is one library in one scenario.
type result struct {
	scenario, lib  string
	ops            int
	elapsed        time.Duration
	p50, p99, maxW time.Duration // lock waits; zero when not measured
	errors         int
	note           string
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func main() {
	flag.Parse()
	var nodes []*redistest.Server
	for i := 0; i < 5; i++ {
		s, err := redistest.Spawn()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer s.Close()
		nodes = append(nodes, s)
	}
	addr := nodes[0].Addr()
	var all []string
	for _, s := range nodes {
		all = append(all, s.Addr())
	}

	single := func() []locker {
		libs := []locker{dlockLocker([]string{addr}), redislockLocker(addr), redsyncLocker([]string{addr})}
		if r, err := rueidislockLocker(addr); err == nil {
			libs = append(libs, r)
		} else {
			fmt.Fprintln(os.Stderr, "rueidislock:", err)
		}
		return libs
	}

	var results []result
	report := func(r result) {
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "%-34s %-14s %10.0f/s  p50 %-9v p99 %-9v max %-9v errors %d\n",
			r.scenario, r.lib, r.perSec(), r.p50, r.p99, r.maxW, r.errors)
	}

	// Uncontended: one goroutine, one key, lock+unlock cycles.
	for _, l := range append([]locker{rawFloor(addr)}, single()...) {
		report(uncontended("uncontended, 1 node", l, *cycles))
		l.close()
	}
	// One hot key.
	for _, g := range []int{16, 64} {
		for _, cs := range []time.Duration{0, time.Millisecond} {
			name := fmt.Sprintf("hot key, %d goroutines, %v CS", g, cs)
			for _, l := range single() {
				report(contended(name, l, g, cs, *duration, false))
				l.close()
			}
		}
	}
	// Many independent keys.
	for _, l := range single() {
		report(contended("64 keys, 64 goroutines", l, 64, 0, *duration, true))
		l.close()
	}
	// Redlock over five nodes.
	for _, l := range []locker{dlockLocker(all), redsyncLocker(all)} {
		report(uncontended("Redlock 5 nodes, uncontended", l, *cycles))
		l.close()
	}
	for _, l := range []locker{dlockLocker(all), redsyncLocker(all)} {
		report(contended("Redlock 5 nodes, hot key, 16 g, 1ms CS", l, 16, time.Millisecond, *duration, false))
		l.close()
	}

	if err := writeReport(*out, *chart, results); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func uncontended(scenario string, l locker, n int) result {
	ctx := context.Background()
	key := fmt.Sprintf("bench:%s:%d", l.name, time.Now().UnixNano())
	r := result{scenario: scenario, lib: l.name}
	// Warm up: connections, scripts.
	for i := 0; i < 100; i++ {
		if unlock, err := l.lock(ctx, key); err == nil {
			_ = unlock()
		}
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		unlock, err := l.lock(ctx, key)
		if err != nil {
			r.errors++
			continue
		}
		if err := unlock(); err != nil {
			r.errors++
		}
		r.ops++
	}
	r.elapsed = time.Since(start)
	return r
}

// contended runs g goroutines for d, each locking (one shared key, or a key
// of its own with manyKeys), holding the lock for cs, and unlocking.
func contended(scenario string, l locker, g int, cs, d time.Duration, manyKeys bool) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	base := fmt.Sprintf("bench:%s:%d", l.name, time.Now().UnixNano())
	var (
		mu     sync.Mutex
		waits  []time.Duration
		errs   atomic.Int64
		wg     sync.WaitGroup
		inside atomic.Int32
		broken atomic.Bool
	)
	start := time.Now()
	for i := 0; i < g; i++ {
		key := base
		if manyKeys {
			key = fmt.Sprintf("%s:%d", base, i)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				unlock, err := l.lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				w := time.Since(t0)
				if !manyKeys && inside.Add(1) != 1 {
					broken.Store(true)
				}
				if cs > 0 {
					time.Sleep(cs)
				}
				if !manyKeys {
					inside.Add(-1)
				}
				if err := unlock(); err != nil {
					errs.Add(1)
				}
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r := result{scenario: scenario, lib: l.name, ops: len(waits), elapsed: time.Since(start), errors: int(errs.Load())}
	if broken.Load() {
		r.note = "MUTUAL EXCLUSION VIOLATED"
	}
	if len(waits) > 0 {
		sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
		r.p50, r.p99, r.maxW = waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1]
	}
	return r
}
