package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// The README's table of figures lies between these lines; make bench
// (-readme) writes it from the run that wrote BENCHMARKS.md.
const (
	readmeStart = "<!-- bench table: written by make bench from the run of BENCHMARKS.md -->"
	readmeEnd   = "<!-- end of bench table -->"
)

// readmeRow is one row of the README's table: a scenario and what it shows.
type readmeRow struct {
	scenario, label string
	show            func(r result) string
}

var readmeRows = []readmeRow{
	{"uncontended, 1 node, one CPU", "uncontended, 1 node, one CPU (ops/s, server µs/op)", func(r result) string {
		return fmt.Sprintf("%s, %.0f", thousands(r.perSec()), us(r.perOp(r.cost.serverCPU)))
	}},
	{"hot key, 16 goroutines, 1ms CS", "hot key, 16 goroutines, 1 ms critical section (CS/s, p99 wait)", withP99},
	{"hot key, 16 goroutines, 0s CS", "hot key, 16 goroutines, no critical section (ops/s, p99 wait)", withP99},
	{"herd, 1000 goroutines, 1ms CS, default pool", "herd: 1,000 goroutines on one key, default pool (CS/s, p99)", withP99},
	{"Redlock 5 nodes, uncontended", "Redlock, 5 nodes, uncontended (ops/s)", rate},
	{"Redlock 5 nodes, hot key, 16 g, 1ms CS", "Redlock, 5 nodes, hot key, 16 goroutines, 1 ms (CS/s)", rate},
}

func rate(r result) string    { return thousands(r.perSec()) }
func withP99(r result) string { return thousands(r.perSec()) + ", " + dur(r.p99) }

// thousands formats a rate with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// measured is the commit the bench measures, read at its start, before it
// writes BENCHMARKS.md and the README.
var measured = commit()

// commit names the commit the bench measures: the library is the tree's
// (go.work), so its HEAD, marked when the tree has changes not committed.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
		c += " (with changes not committed)"
	}
	return c
}

// writeREADMETable rewrites the table between the markers of path from
// results: dlock's figure and the best peer's (the highest rate).
func writeREADMETable(path string, results []result, at time.Time) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	head, rest, ok := bytes.Cut(data, []byte(readmeStart))
	_, tail, ok2 := bytes.Cut(rest, []byte(readmeEnd))
	if !ok || !ok2 {
		return fmt.Errorf("%s: no bench table markers", path)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n| scenario | dlock | best peer |\n| --- | ---: | ---: |\n", readmeStart)
	for _, row := range readmeRows {
		var mine, best *result
		for i, r := range results {
			switch {
			case r.scenario != row.scenario:
			case r.lib == "dlock":
				mine = &results[i]
			case isPeer(r.lib) && (best == nil || r.perSec() > best.perSec()):
				best = &results[i]
			}
		}
		if mine == nil || best == nil {
			return fmt.Errorf("README table: scenario %q has no dlock or peer result", row.scenario)
		}
		fmt.Fprintf(&b, "| %s | %s | %s %s |\n", row.label, row.show(*mine), best.lib, row.show(*best))
	}
	fmt.Fprintf(&b, "\n`make bench` on %s, at commit %s.\n%s", at.UTC().Format("2006-01-02"), measured, readmeEnd)
	return os.WriteFile(path, slices.Concat(head, b.Bytes(), tail), 0o644)
}

// isPeer reports whether lib is one of the peers, not dlock or a floor.
func isPeer(lib string) bool {
	return lib == "bsm/redislock" || lib == "redsync" || lib == "rueidislock"
}
