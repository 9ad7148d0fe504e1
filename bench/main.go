//go:debug updatemaxprocs=0

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
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock-go/dlock/internal/redistest"
)

var (
	duration   = flag.Duration("duration", 3*time.Second, "how long each contended scenario runs")
	cycles     = flag.Int("cycles", 30000, "lock+unlock cycles in each uncontended scenario")
	out        = flag.String("out", "BENCHMARKS.md", "where to write the report")
	readme     = flag.String("readme", "", "rewrite the table of figures in this README from the run (with -out)")
	chart      = flag.String("chart", "benchmarks.svg", "where to write the chart (next to the report)")
	only       = flag.String("only", "", "run only the scenarios whose name contains this (no report is written)")
	libsOnly   = flag.String("libs", "", "run only the libraries whose name starts with one of these, comma-separated (no report is written)")
	rounds     = flag.Int("rounds", 3, "interleaved rounds per scenario (each library runs once per round)")
	cpuProfile = flag.String("cpuprofile", "", "write the bench process's CPU profile to this file")
	herdBound  = flag.Duration("herd-bound", 60*time.Second, "the longest a herd round may take before its waiters give up")
	transports = flag.Bool("transports", false, "add dlock through dlock.Direct and through go-redis's AutoPipeliner beside dlock on one node (no report is written)")
)

// result is one library in one scenario.
type result struct {
	scenario, lib  string
	ops            int
	elapsed        time.Duration
	waits          []time.Duration // each lock call's wait (contended scenarios), cut-off ones included
	p50, p99, maxW time.Duration   // of waits
	cut            int             // lock calls still waiting when the round ended (see holders)
	errors         int
	note           string
	cost           cost
	herd           int // a herd's goroutines (each to be served once); 0 otherwise
	served         int // of them, how many were
}

// perOp returns d per operation.
func (r result) perOp(d time.Duration) time.Duration {
	if r.ops == 0 {
		return 0
	}
	return d / time.Duration(r.ops)
}

func (r *result) setWaits(waits []time.Duration) {
	if len(waits) == 0 {
		return
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	r.p50, r.p99, r.maxW = waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1]
}

func (r result) perSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func main() {
	flag.Parse()
	if *rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds must be at least 1")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
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
		libs := append(dlocks([]string{addr}), redislockLocker(addr), redsyncLocker([]string{addr}))
		if r, err := rueidislockLocker(addr); err == nil {
			libs = append(libs, r)
		} else {
			fmt.Fprintln(os.Stderr, "rueidislock:", err)
		}
		return libs
	}

	m := newMeter(all)
	defer m.close()
	var results []result
	// runRounds measures each library in a scenario in n interleaved
	// rounds, in an order that rotates from round to round, so that the
	// machine's changing load falls on all of them alike, and reports the
	// totals.
	runRounds := func(scenario string, libs []locker, n int, measure func(locker, int) result) {
		herd := strings.HasPrefix(scenario, "herd") || strings.Contains(scenario, "herd")
		defer func(all []locker) {
			for _, l := range all {
				l.close()
			}
		}(libs)
		if skip(scenario) {
			return
		}
		libs = picked(libs)
		if len(libs) == 0 {
			fmt.Fprintf(os.Stderr, "%-40s no library named by -libs %q\n", scenario, *libsOnly)
		}
		total := make([]result, len(libs))
		var waits = make([][]time.Duration, len(libs))
		for round := 0; round < n; round++ {
			// Each round starts with another library: a library's
			// place in the order showed in its cost (in a probe of
			// three scripts in blocks of 2,000, the last of a fixed
			// order cost the server 6 µs less per cycle, in three
			// runs out of three; rotated, the difference went away).
			for j := range libs {
				i := (j + round) % len(libs)
				l := libs[i]
				var r result
				c := m.measure(herd, func() { r = measure(l, round) })
				total[i].cost.add(c)
				total[i].herd += r.herd
				total[i].served += r.served
				total[i].scenario, total[i].lib = scenario, l.name
				total[i].ops += r.ops
				total[i].elapsed += r.elapsed
				total[i].errors += r.errors
				total[i].cut += r.cut
				if r.note != "" {
					total[i].note = r.note
				}
				waits[i] = append(waits[i], r.waits...)
			}
		}
		for i, r := range total {
			r.setWaits(waits[i])
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "%-40s %-14s %10.0f/s  p50 %-9v p99 %-9v max %-9v errors %d cut %d  server %v/op client %v/op cmds %.1f/op scripts %.2f/op conns %d served %d/%d %s\n",
				r.scenario, r.lib, r.perSec(), r.p50, r.p99, r.maxW, r.errors, r.cut,
				r.perOp(r.cost.serverCPU), r.perOp(r.cost.clientCPU), float64(r.cost.commands)/float64(max(r.ops, 1)), float64(r.cost.scripts)/float64(max(r.ops, 1)), r.cost.maxConns, r.served, r.herd, r.note)
		}
	}
	run := func(scenario string, libs []locker, measure func(locker, int) result) {
		runRounds(scenario, libs, *rounds, measure)
	}
	per := *duration / time.Duration(*rounds)
	// Uncontended cycles are short and compared with the raw floor, whose
	// margin is a few percent: they are interleaved ten times as finely,
	// so that a second of outside load cannot fall on one library alone.
	fine := 10 * *rounds
	n := max(*cycles/fine, 1)

	uncontendedLibs := func() []locker {
		libs := append([]locker{rawFloor(addr), fencedFloor(addr)}, single()...)
		return slices.Insert(libs, 3+len(baseLockers), dlockTryLockers(addr)...) // after dlock's Lock
	}
	for _, oneCPU := range []bool{false, true} {
		scenario := "uncontended, 1 node"
		if oneCPU {
			scenario += ", one CPU"
		}
		libs := uncontendedLibs()
		rounds := func() {
			warmUp(scenario, libs)
			runRounds(scenario, libs, fine, func(l locker, _ int) result {
				return uncontended(l, scenario, n)
			})
		}
		if !oneCPU || skip(scenario) {
			rounds()
		} else if err := onOneCPU(nodes[0].Pid(), rounds); err != nil {
			fmt.Fprintln(os.Stderr, "uncontended on one CPU:", err)
			os.Exit(1)
		}
	}
	for _, g := range []int{16, 64} {
		for _, cs := range []time.Duration{0, time.Millisecond} {
			run(fmt.Sprintf("hot key, %d goroutines, %v CS", g, cs), single(), func(l locker, _ int) result {
				return contended(l, g, cs, per, false)
			})
		}
	}
	run("64 keys, 64 goroutines", append([]locker{fencedFloor(addr), fencedFloorPipelined(addr)}, single()...), func(l locker, _ int) result {
		return contended(l, 64, 0, per, true)
	})
	redlockLibs := append(dlocks(all), redsyncLocker(all))
	fiveNodes := "Redlock 5 nodes, uncontended"
	warmUp(fiveNodes, redlockLibs)
	runRounds(fiveNodes, redlockLibs, fine, func(l locker, _ int) result {
		return uncontended(l, fiveNodes, n)
	})
	run("Redlock 5 nodes, hot key, 16 g, 1ms CS", append(dlocks(all), redsyncLocker(all)), func(l locker, _ int) result {
		return contended(l, 16, time.Millisecond, per, false)
	})
	// Herds: many goroutines on one key, each served once, on go-redis's
	// default options (pool of 10 per CPU) as users have them.
	herdLibs := func(addrs []string) []locker {
		poolSize = 0
		defer func() { poolSize = 128 }()
		if len(addrs) > 1 {
			return append(dlocks(addrs), redsyncLocker(addrs))
		}
		return single()
	}
	run("herd, 1000 goroutines, 1ms CS, default pool", herdLibs([]string{addr}), func(l locker, _ int) result {
		return herdRun(l, 1000, time.Millisecond, *herdBound)
	})
	for _, g := range []int{300, 1000} {
		run(fmt.Sprintf("Redlock 5 nodes, herd, %d goroutines, 1ms CS, default pool", g), herdLibs(all), func(l locker, _ int) result {
			return herdRun(l, g, time.Millisecond, *herdBound)
		})
	}
	var mem []memoryRow
	if !skip(fmt.Sprintf("memory, %d keys", memoryKeys)) {
		admin := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		for _, l := range single() {
			if !kept(l.name) {
				l.close()
				continue
			}
			row := measureMemory(admin, l)
			l.close()
			mem = append(mem, row)
			fmt.Fprintf(os.Stderr, "memory, %d keys %-14s held %.0f B/lock released %.0f B/lock keys left %d longest TTL left %v\n",
				memoryKeys, row.lib, row.held, row.released, row.keysLeft, row.longestLeft)
		}
		admin.Close()
	}
	if *only != "" || *libsOnly != "" || *transports {
		return
	}

	if err := writeReport(*out, *chart, results, mem); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if *readme != "" {
		if err := writeREADMETable(*readme, results, time.Now()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// skip reports whether -only leaves scenario out.
func skip(scenario string) bool { return *only != "" && !strings.Contains(scenario, *only) }

// kept reports whether -libs keeps the library named lib.
func kept(lib string) bool {
	return *libsOnly == "" || slices.ContainsFunc(strings.Split(*libsOnly, ","), func(prefix string) bool {
		return strings.HasPrefix(lib, strings.TrimSpace(prefix))
	})
}

// picked is libs less those -libs leaves out.
func picked(libs []locker) []locker {
	return slices.DeleteFunc(slices.Clone(libs), func(l locker) bool { return !kept(l.name) })
}

// uncontendedKey is the key each library locks, round after round, in an
// uncontended scenario.
func uncontendedKey(scenario string, l locker) string {
	return fmt.Sprintf("bench:%s:%s", scenario, l.name)
}

// warmUp runs a few uncontended cycles of each library on its key before
// a scenario's rounds, outside what they measure: connections, loaded
// scripts, a key's fencing counter. (Warmed up in each round instead, a
// library's cost per cycle counted 20 cycles more than its cycles.)
func warmUp(scenario string, libs []locker) {
	if skip(scenario) {
		return
	}
	ctx := context.Background()
	for _, l := range libs {
		for i := 0; i < 20; i++ {
			if unlock, err := l.lock(ctx, uncontendedKey(scenario, l)); err == nil {
				_ = unlock()
			}
		}
	}
}

// uncontended runs n lock+unlock cycles of l on its key in scenario, one
// after another.
func uncontended(l locker, scenario string, n int) result {
	ctx := context.Background()
	key := uncontendedKey(scenario, l)
	var r result
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
// of its own with manyKeys), holding the lock for cs, and unlocking, over
// and over.
func contended(l locker, g int, cs, d time.Duration, manyKeys bool) result {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	base := fmt.Sprintf("bench:%s:%d", l.name, time.Now().UnixNano())
	key := func(i int) string { return base }
	if manyKeys {
		key = func(i int) string { return fmt.Sprintf("%s:%d", base, i) }
	}
	return holders(ctx, l, g, cs, key, !manyKeys, false)
}

// herdRun starts g goroutines at once, each locking the one key once,
// holding it for cs and unlocking, and waits until all are served or bound
// has passed (then the others give up). Throughput is served critical
// sections per second of the whole run; a wait counts from the start.
func herdRun(l locker, g int, cs, bound time.Duration) result {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	key := fmt.Sprintf("bench:herd:%s:%d", l.name, time.Now().UnixNano())
	r := holders(ctx, l, g, cs, func(int) string { return key }, true, true)
	r.herd, r.served = g, r.ops
	return r
}

// holders runs g goroutines that lock key(i), hold the lock for cs and
// unlock, until ctx ends, or (once) until each has been served once. With
// exclusive, it checks that no two hold the lock at once.
//
// A lock call still waiting when ctx ends is cut off: its wait, as long as
// it lasted, counts among the waits (not among the operations), since
// leaving it out would hide the longest waits of a lock that starves some
// of its callers (a goroutine that waited the whole round would count for
// nothing).
func holders(ctx context.Context, l locker, g int, cs time.Duration, key func(i int) string, exclusive, once bool) result {
	var (
		mu     sync.Mutex
		waits  []time.Duration
		cut    []time.Duration // waits cut off by ctx's end
		errs   atomic.Int64
		wg     sync.WaitGroup
		inside atomic.Int32
		broken atomic.Bool
		first  error // the first error, for the report
	)
	fail := func(err error) {
		errs.Add(1)
		mu.Lock()
		if first == nil {
			first = err
		}
		mu.Unlock()
	}
	start := time.Now()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := start
			for ctx.Err() == nil {
				if !once {
					t0 = time.Now()
				}
				unlock, err := l.lock(ctx, key(i))
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("lock: %w", err))
						continue
					}
					mu.Lock()
					cut = append(cut, time.Since(t0))
					mu.Unlock()
					continue
				}
				w := time.Since(t0)
				if exclusive && inside.Add(1) != 1 {
					broken.Store(true)
				}
				if cs > 0 {
					time.Sleep(cs)
				}
				if exclusive {
					inside.Add(-1)
				}
				if err := unlock(); err != nil {
					fail(fmt.Errorf("unlock: %w", err))
				}
				mu.Lock()
				waits = append(waits, w)
				mu.Unlock()
				if once {
					return
				}
			}
		}()
	}
	wg.Wait()
	r := result{ops: len(waits), elapsed: time.Since(start), errors: int(errs.Load()), waits: append(waits, cut...), cut: len(cut)}
	switch {
	case broken.Load():
		r.note = "MUTUAL EXCLUSION VIOLATED"
	case first != nil:
		r.note = "first error: " + first.Error()
	}
	return r
}
