package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/torture"
)

// A short torture run with --report writes a timeline that parses, holds
// the run's bars, write marks and fault band, and an index linking it.
func TestTortureReportWritesTimelines(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	dir := t.TempDir()
	code, out, errOut := run(t, "torture", "--quick", "--scenario", "client-pause", "--report", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, mode := range []string{"single", "redlock"} {
		f, err := os.Open(filepath.Join(dir, "client-pause-"+mode+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		d := xml.NewDecoder(f)
		for {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: the SVG does not parse: %v", mode, err)
			}
			if el, ok := tok.(xml.StartElement); ok {
				for _, a := range el.Attr {
					if a.Name.Local == "class" {
						counts[strings.Fields(a.Value)[0]]++
					}
				}
			}
		}
		f.Close()
		if counts["hold"] == 0 || counts["write"] == 0 || counts["fault"] == 0 {
			t.Errorf("%s: elements by class %v: want holds, writes and the faults", mode, counts)
		}
	}
	idx, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil || !strings.Contains(string(idx), `href="client-pause-redlock.svg"`) {
		t.Fatalf("index.html: %v\n%s", err, idx)
	}
}

// The torture report's table fits 100 columns.
func TestTortureTableFitsAHundredColumns(t *testing.T) {
	t.Parallel() // waits more than it works (Makefile: -parallel)
	code, out, errOut := run(t, "torture", "--quick", "--scenario", "baseline")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("a line of the table is %d columns wide: %q", n, line)
		}
	}
	if !strings.Contains(out, "baseline") || !strings.Contains(out, "redlock") {
		t.Errorf("the table does not show the runs:\n%s", out)
	}
}

// The results' tables fit 100 columns with every scenario's name, large
// figures and every kind of error at once, and show them all.
func TestTortureTablesFitAHundredColumnsAtWorst(t *testing.T) {
	errs := map[string]int{}
	for _, k := range []string{"not_obtained", "timeout", "no_quorum", "node", "lease_expired", "replica_ack", "not_held", "other"} {
		errs[k] = 123456
	}
	var results []torture.Result
	for _, sc := range torture.Scenarios() {
		for _, mode := range sc.Modes {
			results = append(results, torture.Result{Scenario: sc.Name, Mode: mode, Grants: 1234567, Overlaps: 123456,
				Accepted: 12345678, StaleRejected: 1234567, StaleAccepted: 1234, FenceRegressions: 1234, LossNotices: 12345,
				LossOnTime: 12345, Waiters: 50000, Unserved: 1, Killed: 1, Takeovers: 12345, Failovers: 123, MaxConnections: 12345, Errors: errs})
		}
	}
	var b strings.Builder
	writeResults(&b, results)
	out := b.String()
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 100 {
			t.Errorf("a line is %d columns wide: %q", n, line)
		}
	}
	for _, r := range results {
		if strings.Count(out, r.Scenario+" ") < 2 {
			t.Errorf("%s is not in both tables:\n%s", r.Scenario, out)
		}
	}
	for k := range errs {
		if strings.Count(out, k+":123456") != len(results) {
			t.Errorf("not every row shows its %s errors:\n%s", k, out)
		}
	}
}
