package torture

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// svgCounts parses an SVG and counts its elements by class, and collects
// its texts.
func svgCounts(t *testing.T, data []byte) (map[string]int, string) {
	t.Helper()
	counts := map[string]int{}
	var texts strings.Builder
	d := xml.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the SVG does not parse: %v\n%s", err, data)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			for _, a := range el.Attr {
				if a.Name.Local == "class" {
					counts[a.Value]++
				}
			}
		case xml.CharData:
			texts.Write(el)
		}
	}
	return counts, texts.String()
}

// The timeline of a history holds one bar per hold, red where two clients
// overlap, a mark per write decided, and the fault as a named band.
func TestTheTimelineDrawsTheHistory(t *testing.T) {
	s := int64(time.Second)
	h := &History{Start: 0, End: 5 * s, Lanes: 3, PerLane: 1,
		Events: []Event{
			{Kind: "grant", Client: 0, Fence: 1, At: s / 2},
			{Kind: "release", Client: 0, Fence: 1, At: 2 * s}, // overlaps client 1's
			{Kind: "grant", Client: 1, Fence: 2, At: s},
			{Kind: "release", Client: 1, Fence: 2, At: 3 * s},
			{Kind: "grant", Client: 2, Fence: 3, At: 3*s + s/2}, // alone
			{Kind: "lost", Client: 2, Fence: 3, At: 4 * s},
		},
		Writes: []Write{
			{Client: 1, Fence: 2, Accepted: true, At: s + s/2},
			{Client: 0, Fence: 1, Accepted: false, At: s + s/2 + 1},
			{Client: 2, Fence: 3, Accepted: true, At: 3*s + s/2 + 1},
		},
		Faults: []Fault{{Name: "SIGSTOP client 0", From: s / 2, To: 2 * s}},
	}
	r := Result{Scenario: "client-pause", Mode: "single", Grants: 3, Overlaps: 1, Accepted: 2, StaleRejected: 1, History: h}
	var buf bytes.Buffer
	if err := WriteTimeline(&buf, r, 1, false); err != nil {
		t.Fatal(err)
	}
	counts, texts := svgCounts(t, buf.Bytes())
	want := map[string]int{"hold": 1, "hold overlap": 2, "write accepted": 2, "write refused": 1, "fault": 1, "fault-name": 1}
	for class, n := range want {
		if counts[class] != n {
			t.Errorf("%d elements of class %q, want %d\n%s", counts[class], class, n, buf.String())
		}
	}
	for _, s := range []string{"SIGSTOP client 0", "client 2", "client-pause (single)"} {
		if !strings.Contains(texts, s) {
			t.Errorf("the SVG does not say %q", s)
		}
	}
	// Readers of a read-write lock may overlap each other.
	h.Events[0].Client, h.Events[1].Client = 3, 3
	buf.Reset()
	_ = WriteTimeline(&buf, r, 1, true)
	if counts, _ := svgCounts(t, buf.Bytes()); counts["hold overlap"] != 0 {
		t.Errorf("readers 1 and 3 marked as overlapping: %v", counts)
	}
	var idx bytes.Buffer
	if err := WriteIndex(&idx, []Result{r}); err != nil || !strings.Contains(idx.String(), `href="client-pause-single.svg"`) {
		t.Fatalf("index: %v\n%s", err, idx.String())
	}
}

// The timeline says what its colours and marks mean, inside the picture.
func TestTheTimelineHasALegend(t *testing.T) {
	s := int64(time.Second)
	h := &History{Start: 0, End: 2 * s, Lanes: 1, PerLane: 1,
		Events: []Event{{Kind: "grant", Client: 0, Fence: 1, At: s / 2}, {Kind: "release", Client: 0, Fence: 1, At: s}}}
	var buf bytes.Buffer
	if err := WriteTimeline(&buf, Result{Scenario: "baseline", Mode: "single", History: h}, 1, false); err != nil {
		t.Fatal(err)
	}
	counts, texts := svgCounts(t, buf.Bytes())
	if counts["legend"] == 0 {
		t.Errorf("no element of class legend:\n%s", buf.String())
	}
	for _, s := range []string{"hold (grant to release or loss)", "two clients hold at once", "write accepted", "write refused (stale fence)", "fault injected"} {
		if !strings.Contains(texts, s) {
			t.Errorf("the legend does not say %q:\n%s", s, buf.String())
		}
	}
}
