package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A short torture run with --report writes a timeline that parses, holds
// the run's bars, write marks and fault band, and an index linking it.
func TestTortureReportWritesTimelines(t *testing.T) {
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
