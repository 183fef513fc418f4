package report

import (
	"bytes"
	"image/color"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// TestEveryPlotSaysWhatItShows fails while any plot of the fixture report
// has no reading (the text under it saying what it shows and how to read
// it). EXPECTED TO FAIL until every kind's section fills plotSpec.reading
// (issue 14 item 6): each kind's owner writes its own; run it after
// merging them all.
func TestEveryPlotSaysWhatItShows(t *testing.T) {
	if missing := plotsWithoutReading(fixtureReport(t).build()); len(missing) > 0 {
		t.Errorf("%d plots have no reading:\n%s", len(missing), strings.Join(missing, "\n"))
	}
}

// plotsWithoutReading names the plots of d with an empty reading.
func plotsWithoutReading(d *document) []string {
	var missing []string
	for _, s := range d.sections {
		for _, p := range s.plots {
			if strings.TrimSpace(p.reading) == "" {
				missing = append(missing, s.title+" / "+p.title)
			}
		}
	}
	return missing
}

// TestLegendsOutsideTheData draws every plot of the fixture report as
// renderSVG does and checks that its legend lies within the canvas and
// outside the data area, which is where gonum drew it (over the curves).
func TestLegendsOutsideTheData(t *testing.T) {
	withLegend := 0
	for _, s := range fixtureReport(t).build().sections {
		for _, spec := range s.plots {
			p, err := spec.draw()
			if err != nil {
				t.Fatalf("%s: %v", spec.title, err)
			}
			sans(p)
			lay := legendLayout(p, spec.w, spec.h)
			if lay.legend == (vg.Rectangle{}) {
				continue
			}
			withLegend++
			c := draw.New(vgsvg.New(lay.size.X, lay.size.Y))
			data := p.DataCanvas(draw.Canvas{Canvas: c.Canvas, Rectangle: lay.plot}).Rectangle
			if overlaps(data, lay.legend) {
				t.Errorf("%s: legend %v overlaps the data area %v", spec.title, lay.legend, data)
			}
			// And the drawing follows the layout: the legend's labels are
			// the only text of the SVG inside its box, and no text lies in
			// the data area (gonum wrote the legend there).
			svg, err := renderSVG(p, spec.w, spec.h)
			if err != nil {
				t.Fatalf("%s: %v", spec.title, err)
			}
			inLegend := 0
			for _, tx := range svgTexts(t, svg) {
				if within(tx.at, data) {
					t.Errorf("%s: text %q at %v inside the data area %v", spec.title, tx.text, tx.at, data)
				}
				if within(tx.at, lay.legend) {
					inLegend++
				}
			}
			if inLegend == 0 {
				t.Errorf("%s: no legend text inside the legend's box %v", spec.title, lay.legend)
			}
			whole := vg.Rectangle{Max: lay.size}
			if !inside(lay.legend, whole) || !inside(lay.plot, whole) {
				t.Errorf("%s: legend %v or plot %v outside the canvas %v", spec.title, lay.legend, lay.plot, whole)
			}
		}
	}
	// The latency, trace-overhead, bufsweep and grouped-bar plots have legends.
	if withLegend < 5 {
		t.Fatalf("only %d fixture plots have a legend; the check proves nothing", withLegend)
	}
}

type svgText struct {
	text string
	at   vg.Point // where it starts, in gonum's coordinates (y up)
}

// reSVGText matches the text elements vgsvg writes: in a group flipped to
// gonum's y-up coordinates, each flipped back with its y negated.
var reSVGText = regexp.MustCompile(`<text x="([-0-9.e]+)" y="([-0-9.e]+)" transform="scale\(1, -1\)"\s+style="[^"]*">([^<]*)</text>`)

func svgTexts(t *testing.T, svg []byte) []svgText {
	t.Helper()
	var out []svgText
	for _, m := range reSVGText.FindAllSubmatch(svg, -1) {
		x, errX := strconv.ParseFloat(string(m[1]), 64)
		y, errY := strconv.ParseFloat(string(m[2]), 64)
		if errX != nil || errY != nil {
			t.Fatalf("text at %q, %q", m[1], m[2])
		}
		out = append(out, svgText{text: string(m[3]), at: vg.Point{X: vg.Length(x), Y: vg.Length(-y)}})
	}
	if len(out) == 0 || len(out) != bytes.Count(svg, []byte("<text")) {
		t.Fatalf("read %d of %d text elements of the SVG", len(out), bytes.Count(svg, []byte("<text")))
	}
	return out
}

func within(p vg.Point, r vg.Rectangle) bool {
	return p.X > r.Min.X && p.X < r.Max.X && p.Y > r.Min.Y && p.Y < r.Max.Y
}

func inside(r, outer vg.Rectangle) bool {
	return r.Min.X >= outer.Min.X && r.Min.Y >= outer.Min.Y && r.Max.X <= outer.Max.X && r.Max.Y <= outer.Max.Y
}

func TestLayoutLegend(t *testing.T) {
	w, h := 5*vg.Inch, 3*vg.Inch
	for name, c := range map[string]struct {
		legend    vg.Point
		wantBelow bool
	}{
		"narrow, beside":         {vg.Point{X: vg.Inch, Y: vg.Inch}, false},
		"taller than the plot":   {vg.Point{X: vg.Inch, Y: 5 * vg.Inch}, false},
		"too wide, below":        {vg.Point{X: 3 * vg.Inch, Y: vg.Inch}, true},
		"wide and tall, below":   {vg.Point{X: 4 * vg.Inch, Y: 4 * vg.Inch}, true},
		"just at the wide limit": {vg.Point{X: vg.Length(legendBesideMax) * w, Y: vg.Inch}, false},
	} {
		lay := layoutLegend(w, h, c.legend)
		if overlaps(lay.plot, lay.legend) {
			t.Errorf("%s: plot %v and legend %v overlap", name, lay.plot, lay.legend)
		}
		if got := lay.legend.Size(); math.Abs(float64(got.X-c.legend.X)) > 1e-9 || math.Abs(float64(got.Y-c.legend.Y)) > 1e-9 {
			t.Errorf("%s: legend drawn at %v, measured %v", name, got, c.legend)
		}
		whole := vg.Rectangle{Max: lay.size}
		if !inside(lay.legend, whole) || !inside(lay.plot, whole) {
			t.Errorf("%s: outside the canvas %v: plot %v legend %v", name, whole, lay.plot, lay.legend)
		}
		if below := lay.legend.Max.Y <= lay.plot.Min.Y; below != c.wantBelow {
			t.Errorf("%s: legend below = %v, want %v", name, below, c.wantBelow)
		}
		// The plot keeps its height; beside, it gives up only the legend's width.
		if lay.plot.Size().Y != h {
			t.Errorf("%s: plot height %v, want %v", name, lay.plot.Size().Y, h)
		}
	}
	if lay := layoutLegend(w, h, vg.Point{}); lay.plot.Size() != (vg.Point{X: w, Y: h}) || lay.legend != (vg.Rectangle{}) {
		t.Errorf("no legend: %+v", lay)
	}
}

func labelled(ts []plot.Tick) (values []float64, labels []string) {
	for _, t := range ts {
		if t.Label != "" {
			values, labels = append(values, t.Value), append(labels, t.Label)
		}
	}
	return values, labels
}

func TestNinesTicks(t *testing.T) {
	ts := ninesTicks{}.Ticks(nines(50), nines(99.999))
	values, labels := labelled(ts)
	if want := []string{"50", "90", "99", "99.9", "99.99", "99.999"}; !slices.Equal(labels, want) {
		t.Fatalf("labels %q, want %q", labels, want)
	}
	// Each labelled tick sits at its number of nines: equally spaced.
	for i, want := range []float64{math.Log10(2), 1, 2, 3, 4, 5} {
		if math.Abs(values[i]-want) > 1e-6 {
			t.Errorf("tick %s at x=%v, want %v", labels[i], values[i], want)
		}
	}
	// 95 is an unlabelled tick between 90 and 99.
	if !slices.ContainsFunc(ts, func(tk plot.Tick) bool { return tk.Label == "" && math.Abs(tk.Value-nines(95)) < 1e-9 }) {
		t.Errorf("no minor tick at 95: %v", ts)
	}
	if _, l := labelled((ninesTicks{}).Ticks(0, nines(99.99999))); l[0] != "0" || l[len(l)-1] != "99.99999" {
		t.Errorf("from p0 to p99.99999: %q", l)
	}
}

func TestPercentileCurvesAxes(t *testing.T) {
	p, err := percentileCurves("t", []curve{{"a", [][2]float64{{50, 10}, {90, 12}, {99, 30}, {99.9, 80}, {99.99, 400}, {100, 9000}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Errorf("y scale %T, want log", p.Y.Scale)
	}
	// The axis ends at the highest finite percentile drawn (p100 cannot be).
	if p.X.Min != nines(50) || math.Abs(p.X.Max-4) > 1e-6 {
		t.Errorf("x from %v to %v, want %v to 4", p.X.Min, p.X.Max, nines(50))
	}
	// Between ticks, it ends at the next one: p99.95 after p99.93.
	p, err = percentileCurves("t", []curve{{"a", [][2]float64{{50, 10}, {99.93, 40}}}})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.X.Max-nines(99.95)) > 1e-6 {
		t.Errorf("x ends at %v, want p99.95's %v", p.X.Max, nines(99.95))
	}
	if _, l := labelled(p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max)); len(l) < 3 {
		t.Errorf("y axis over %v..%v has labels %q, want at least three", p.Y.Min, p.Y.Max, l)
	}
}

func TestLogTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		// A curve inside one decade still gets labels (gonum's LogTicks gave none).
		{20, 80, []string{"20", "30", "40", "50", "60", "70", "80"}},
		{3, 700, []string{"5", "10", "20", "50", "100", "200", "500"}},
		{0.5, 1e6, []string{"1", "10", "100", "1000", "10000", "100000", "1000000"}},
		{0.02, 0.6, []string{"0.02", "0.05", "0.1", "0.2", "0.5"}},
	} {
		if _, got := labelled((logTicks{}).Ticks(c.lo, c.hi)); !slices.Equal(got, c.want) {
			t.Errorf("ticks over [%v, %v]: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
	if got := (logTicks{}).Ticks(0, 10); got != nil {
		t.Errorf("a range from 0 has no log ticks, got %v", got)
	}
}

func TestSeriesStylesDistinct(t *testing.T) {
	labels := make([]string, 30)
	for i := range labels {
		labels[i] = "series " + string(rune('a'+i))
	}
	styles := seriesStyles(labels)
	colours := map[color.Color]bool{}
	for _, st := range styles[:len(palette)] {
		colours[st.colour] = true
	}
	if len(colours) != len(palette) {
		t.Errorf("the first %d series have %d distinct colours", len(palette), len(colours))
	}
	// Beyond the palette, colour and dash pattern together stay distinct.
	looks := map[string]bool{}
	for i, st := range styles {
		key := fmtColour(st.colour) + " " + fmtDashes(st.dashes)
		if looks[key] {
			t.Errorf("series %d repeats the look %s", i, key)
		}
		looks[key] = true
	}
	// The strong colours come before the pale ones.
	for _, st := range seriesStyles(labels[:strongColours]) {
		if slices.Index(palette, st.colour) >= strongColours {
			t.Errorf("a pale colour among the first %d series", strongColours)
		}
	}
}

// The same label keeps its colour across plots of a report, whatever the
// other series of each plot, as long as their preferred colours differ.
func TestSeriesStylesFollowTheLabel(t *testing.T) {
	states := []string{"none", "idle", "logging"}
	prefs := map[int]bool{}
	for _, s := range states {
		prefs[preferredColour(s)] = true
	}
	if len(prefs) != len(states) {
		t.Fatalf("the test's labels %q share a preferred colour; pick others", states)
	}
	colourOf := func(labels []string, label string) color.Color {
		return seriesStyles(labels)[slices.Index(labels, label)].colour
	}
	for _, s := range states {
		alone := colourOf([]string{s}, s)
		if got := colourOf([]string{"logging", "idle", "none"}, s); got != alone {
			t.Errorf("%s: %v in one plot, %v in another", s, got, alone)
		}
	}
}

func fmtColour(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return string([]byte{byte(r >> 8), byte(g >> 8), byte(b >> 8)})
}

func fmtDashes(d []vg.Length) string {
	var b strings.Builder
	for _, l := range d {
		b.WriteString(strings.Repeat("-", int(l)) + " ")
	}
	return b.String()
}

// millionSamples is seed 004's run: a million round trips of about 5 µs,
// one 20 ms stall and one 1 µs fast path.
func millionSamples() (ns []float64, spikeAt int) {
	r := rand.New(rand.NewPCG(1, 2))
	ns = make([]float64, 1_000_000)
	for i := range ns {
		ns[i] = 4000 + r.ExpFloat64()*1000
	}
	spikeAt = 777_777
	ns[spikeAt] = 20e6
	ns[123_456] = 1000
	return ns, spikeAt
}

func TestDecimateKeepsTheExtremes(t *testing.T) {
	ns, spikeAt := millionSamples()
	size, buckets := decimate(ns, maxBuckets)
	if len(buckets) > maxBuckets || size != 1000 {
		t.Fatalf("%d buckets of %d samples, want at most %d", len(buckets), size, maxBuckets)
	}
	b := buckets[spikeAt/size]
	if b.peak != 20e6 || b.first > spikeAt || b.first+size <= spikeAt {
		t.Errorf("the bucket of sample %d is %+v, want its peak 20 ms", spikeAt, b)
	}
	if got := buckets[123_456/size].lo; got != 1000 {
		t.Errorf("the fastest sample's bucket has minimum %v, want 1000", got)
	}
	// Non-positive samples are left out, not drawn at 0 on a log axis.
	if _, bs := decimate([]float64{0, -1, 5, 7}, 2); len(bs) != 1 || bs[0].lo != 5 {
		t.Errorf("decimate with zeros: %+v", bs)
	}
}

func TestTimeSeriesOfAMillionSamples(t *testing.T) {
	ns, _ := millionSamples()
	p, err := timeSeries("pipe 100", ns)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Errorf("y scale %T, want log", p.Y.Scale)
	}
	if p.Y.Max < 20e3 || p.Y.Min > 1 {
		t.Errorf("y axis %v..%v µs hides the 1 µs or the 20 ms sample", p.Y.Min, p.Y.Max)
	}
	svg, err := renderSVG(p, wideW, wideH)
	if err != nil {
		t.Fatal(err)
	}
	if len(svg) > 1<<20 {
		t.Errorf("a million-sample time series is %d bytes of SVG, want under 1 MiB", len(svg))
	}
	t.Logf("%d bytes of SVG", len(svg))
}

func TestOutlierHistogramLogBins(t *testing.T) {
	ns, _ := millionSamples()
	q99 := 9000.0
	p, err := outlierHistogram("pipe 100", ns, q99)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.X.Scale.(plot.LogScale); !ok {
		t.Errorf("x scale %T, want log: the outliers span 9 µs to 20 ms", p.X.Scale)
	}
	if _, ok := p.Y.Scale.(plot.LogScale); !ok {
		t.Errorf("count scale %T, want log", p.Y.Scale)
	}
	var above []float64
	for _, x := range ns {
		if x > q99 {
			above = append(above, x/1e3)
		}
	}
	bins := logBins(q99/1e3, slices.Max(above), above)
	total := 0.0
	for i, b := range bins {
		total += b.Weight
		if i > 0 && math.Abs(b.Max/b.Min-bins[0].Max/bins[0].Min) > 1e-9 {
			t.Errorf("bin %d spans ×%v, bin 0 ×%v: not log-spaced", i, b.Max/b.Min, bins[0].Max/bins[0].Min)
		}
	}
	if int(total) != len(above) {
		t.Errorf("bins hold %v samples, want %d", total, len(above))
	}
	if last := bins[len(bins)-1]; last.Weight != 1 || last.Max < 20e3 {
		t.Errorf("the 20 ms stall is not alone in the last bin: %+v", last)
	}
	if len(bins) > nBins(len(above)) {
		t.Errorf("%d bins", len(bins))
	}
}

func TestLinearTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   []string
	}{
		{0, 2900, []string{"0", "1000", "2000"}},
		{0, 1.3, []string{"0.0", "0.5", "1.0"}},
		{-0.6, 4.4, []string{"0", "1", "2", "3", "4"}},
		{0, 55, []string{"0", "20", "40"}},
	} {
		if _, got := labelled((linearTicks{}).Ticks(c.lo, c.hi)); !slices.Equal(got, c.want) {
			t.Errorf("ticks over [%v, %v]: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

func TestSizeTicks(t *testing.T) {
	if _, got := labelled((sizeTicks{}).Ticks(1, 1<<20)); !slices.Equal(got, []string{"1", "16", "256", "4K", "64K", "1M"}) {
		t.Errorf("1 B to 1 MiB labelled %q", got)
	}
	if _, got := labelled((sizeTicks{}).Ticks(64, 1<<16)); !slices.Equal(got, []string{"64", "256", "1K", "4K", "16K", "64K"}) {
		t.Errorf("64 B to 64 KiB labelled %q", got)
	}
}
