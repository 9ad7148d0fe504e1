package torture

import (
	"image"
	"image/png"
	"os"
	"testing"
)

// With $DLOCK_TIMELINE_PNG set to a timeline rendered by a browser (`make
// timeline-png` renders one in headless Chromium), the picture shows what
// the SVG says: hold bars and the fault's band, in their colours. What a
// person sees is checked, not only the file.
func TestTheRenderedTimelineShowsBarsAndTheFault(t *testing.T) {
	path := os.Getenv("DLOCK_TIMELINE_PNG")
	if path == "" {
		t.Skip("DLOCK_TIMELINE_PNG not set (make timeline-png sets it)")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The bars' and band's colours over white (timeline.go): blue at 0.8,
	// red at 0.8, grey at 0.25.
	near := func(c [3]int) func(r, g, b int) bool {
		return func(r, g, b int) bool { return abs(r-c[0]) < 16 && abs(g-c[1]) < 16 && abs(b-c[2]) < 16 }
	}
	blue, red, band := near([3]int{110, 152, 200}), near([3]int{222, 82, 83}), near([3]int{230, 230, 230})
	var nBlue, nRed, nBand int
	bounds := img.Bounds()
	for y := bounds.Min.Y; y < bounds.Max.Y; y++ {
		for x := bounds.Min.X; x < bounds.Max.X; x++ {
			r, g, b := rgb(img, x, y)
			switch {
			case blue(r, g, b):
				nBlue++
			case red(r, g, b):
				nRed++
			case band(r, g, b):
				nBand++
			}
		}
	}
	t.Logf("%v: %d blue (holds), %d red (overlaps), %d grey (fault band) pixels", bounds.Size(), nBlue, nRed, nBand)
	if nBlue+nRed < 200 || nBand < 200 {
		t.Fatalf("the picture does not show the bars and the fault: %d blue, %d red, %d grey pixels", nBlue, nRed, nBand)
	}
}

func rgb(img image.Image, x, y int) (int, int, int) {
	r, g, b, _ := img.At(x, y).RGBA()
	return int(r >> 8), int(g >> 8), int(b >> 8)
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
