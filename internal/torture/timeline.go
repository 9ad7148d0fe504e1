package torture

import (
	"fmt"
	"html"
	"io"
	"sort"
	"strings"
)

// The timeline: a picture of one run in the spirit of Jepsen's. One lane
// per client process; each hold a bar from its grant to its release, loss
// notice or kill (red where it overlaps another client's hold, blue
// otherwise); the resource's decisions as marks on the writer's lane (a
// green tick accepted, a red cross refused); each fault a shaded band
// across every lane, with its name. Times are from the run's start. A
// legend under the time axis says what the colours and marks mean, so
// that the picture reads on its own.

// Timeline geometry, in SVG user units.
const (
	tlWidth  = 1000 // the time axis
	tlLeft   = 90   // lane labels
	tlLane   = 28   // lane height
	tlTop    = 46   // title and fault labels
	tlBottom = 30   // time axis labels
	tlLegend = 24   // the legend's row, under the time axis
)

// Colours of the timeline and its legend.
const (
	holdColour     = "#4a7ebb"
	overlapColour  = "#d62728"
	acceptedColour = "#2ca02c"
	refusedColour  = "#d62728"
	faultColour    = "#999"
)

// holding is one client's holding interval (ns), as the checker counts it.
type holding struct {
	lane, client int
	from, to     int64
	overlap      bool
}

// holds reconstructs the holding intervals of h and marks the overlaps
// between different clients (readers of a read-write lock excepted when
// rw; for a semaphore of permits > 1, none is marked: several hold by
// design).
func (h *History) holds(permits int, rw bool) []*holding {
	events := append([]Event(nil), h.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	open := map[int]*holding{}
	var out []*holding
	for _, e := range events {
		switch e.Kind {
		case "grant":
			hd := &holding{lane: e.Client / max(1, h.PerLane), client: e.Client, from: e.At, to: h.End}
			open[e.Client] = hd
			out = append(out, hd)
		case "release", "lost", "killed":
			if hd := open[e.Client]; hd != nil && e.At < hd.to {
				hd.to = e.At
				delete(open, e.Client)
			}
		}
	}
	if permits > 1 {
		return out
	}
	for i, a := range out {
		for _, b := range out[i+1:] {
			if a.client != b.client && a.from < b.to && b.from < a.to && !(rw && reader(a.client) && reader(b.client)) {
				a.overlap, b.overlap = true, true
			}
		}
	}
	return out
}

// WriteTimeline writes r's history as an SVG picture (see the top of
// timeline.go). permits and rw are the scenario's, as for the checker.
func WriteTimeline(w io.Writer, r Result, permits int, rw bool) error {
	h := r.History
	if h == nil {
		return fmt.Errorf("torture: %s/%s has no history", r.Scenario, r.Mode)
	}
	span := max(h.End-h.Start, 1)
	x := func(t int64) float64 { return tlLeft + float64(t-h.Start)*tlWidth/float64(span) }
	laneY := func(l int) float64 { return float64(tlTop + l*tlLane) }
	axis := tlTop + h.Lanes*tlLane + tlBottom
	height := axis + tlLegend
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %[1]d %[2]d" font-family="sans-serif" font-size="11">`+"\n", tlLeft+tlWidth+20, height)
	fmt.Fprintf(&b, `<title>%s</title>`+"\n", html.EscapeString(r.Scenario+" / "+r.Mode))
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="4" y="14" font-size="13" font-weight="bold">%s (%s): %d grants, %d overlaps, %d accepted, %d refused, %d stale accepted</text>`+"\n",
		html.EscapeString(r.Scenario), html.EscapeString(r.Mode), r.Grants, r.Overlaps, r.Accepted, r.StaleRejected, r.StaleAccepted)
	for _, f := range h.Faults {
		x0, x1 := x(f.From), x(f.To)
		fmt.Fprintf(&b, `<rect class="fault" x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="0.25"/>`+"\n", x0, tlTop-6, max(x1-x0, 2), h.Lanes*tlLane+6, faultColour)
		fmt.Fprintf(&b, `<text class="fault-name" x="%.1f" y="%d" fill="#555">%s</text>`+"\n", x0, tlTop-10, html.EscapeString(f.Name))
	}
	for l := 0; l < h.Lanes; l++ {
		y := laneY(l)
		fmt.Fprintf(&b, `<text x="4" y="%.0f">client %d</text>`+"\n", y+tlLane/2+4, l)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="#ddd"/>`+"\n", tlLeft, y+tlLane, tlLeft+tlWidth, y+tlLane)
	}
	for _, hd := range h.holds(permits, rw) {
		class, fill := "hold", holdColour
		if hd.overlap {
			class, fill = "hold overlap", overlapColour
		}
		fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.0f" width="%.1f" height="%d" fill="%s" fill-opacity="0.8"/>`+"\n",
			class, x(hd.from), laneY(hd.lane)+6, max(x(hd.to)-x(hd.from), 1), tlLane-12, fill)
	}
	for _, wr := range h.Writes {
		if wr.At == 0 {
			continue
		}
		cx, cy := x(wr.At), laneY(wr.Client/max(1, h.PerLane))+tlLane/2
		if wr.Accepted {
			fmt.Fprintf(&b, `<path class="write accepted" d="M%.1f %.1f %s" stroke="%s" stroke-width="1.5" fill="none"/>`+"\n", cx-4, cy, tick, acceptedColour)
		} else {
			fmt.Fprintf(&b, `<path class="write refused" d="M%.1f %.1f %s" stroke="%s" stroke-width="2" fill="none"/>`+"\n", cx-4, cy-4, cross, refusedColour)
		}
	}
	secs := float64(span) / 1e9
	step := 1.0
	for secs/step > 12 {
		step *= 2
	}
	for s := 0.0; s <= secs; s += step {
		px := tlLeft + s*tlWidth/secs
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%gs</text>`+"\n", px, axis-10, s)
	}
	writeLegend(&b, axis+6)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// The write marks' shapes, drawn from their top left corner.
const (
	tick  = "l3 4 l5 -8"
	cross = "l8 8 m0 -8 l-8 8"
)

// writeLegend draws the legend's row with its top at y: a swatch of each
// colour or mark, and what it means.
func writeLegend(b *strings.Builder, y int) {
	b.WriteString(`<g class="legend">` + "\n")
	x := 4
	item := func(swatch, text string) {
		fmt.Fprintf(b, swatch+"\n", x, y)
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#333">%s</text>`+"\n", x+20, y+11, html.EscapeString(text))
		x += 20 + 6*len(text) + 24 // about 6 units a character at this size
	}
	item(`<rect x="%d" y="%d" width="14" height="12" fill="`+holdColour+`" fill-opacity="0.8"/>`, "hold (grant to release or loss)")
	item(`<rect x="%d" y="%d" width="14" height="12" fill="`+overlapColour+`" fill-opacity="0.8"/>`, "two clients hold at once")
	item(`<path d="M%d %d m3 6 `+tick+`" stroke="`+acceptedColour+`" stroke-width="1.5" fill="none"/>`, "write accepted")
	item(`<path d="M%d %d m3 2 `+cross+`" stroke="`+refusedColour+`" stroke-width="2" fill="none"/>`, "write refused (stale fence)")
	item(`<rect x="%d" y="%d" width="14" height="12" fill="`+faultColour+`" fill-opacity="0.25"/>`, "fault injected (named above)")
	b.WriteString("</g>\n")
}

// WriteIndex writes an HTML page that links each run's timeline (files
// named by TimelineName) beside its figures.
func WriteIndex(w io.Writer, results []Result) error {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<meta charset=\"utf-8\">\n<title>dlock torture</title>\n<h1>dlock torture</h1>\n<table border=\"1\" cellpadding=\"4\">\n")
	b.WriteString("<tr><th>scenario</th><th>mode</th><th>grants</th><th>overlaps</th><th>accepted</th><th>stale rejected</th><th>stale accepted</th><th>fence regressions</th><th>result</th></tr>\n")
	for _, r := range results {
		verdict := "ok"
		if !r.OK() {
			verdict = "FAIL"
		}
		name := TimelineName(r)
		fmt.Fprintf(&b, "<tr><td><a href=\"%s\">%s</a></td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td><td>%s</td></tr>\n",
			html.EscapeString(name), html.EscapeString(r.Scenario), html.EscapeString(r.Mode), r.Grants, r.Overlaps, r.Accepted, r.StaleRejected, r.StaleAccepted, r.FenceRegressions, verdict)
	}
	b.WriteString("</table>\n")
	for _, r := range results {
		fmt.Fprintf(&b, "<h2 id=\"%[1]s\">%[1]s</h2>\n<img src=\"%[2]s\" alt=\"%[1]s timeline\">\n", html.EscapeString(r.Scenario+"/"+r.Mode), html.EscapeString(TimelineName(r)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// TimelineName is the file name of a run's timeline.
func TimelineName(r Result) string {
	return strings.NewReplacer("+", "_", "/", "_").Replace(r.Scenario) + "-" + r.Mode + ".svg"
}
