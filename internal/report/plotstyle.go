package report

import (
	"hash/fnv"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// palette is Tableau 10, a qualitative palette whose ten colours stay
// distinct for most colour-blind readers and on paper; gonum's default
// has seven and repeats the eighth series' colour. The first
// strongColours are the ones that read well as thin lines on white; the
// pale three are used only when a plot has more series than that.
var palette = []color.Color{
	color.RGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 0xff}, // blue
	color.RGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 0xff}, // orange
	color.RGBA{R: 0xe1, G: 0x57, B: 0x59, A: 0xff}, // red
	color.RGBA{R: 0x76, G: 0xb7, B: 0xb2, A: 0xff}, // teal
	color.RGBA{R: 0x59, G: 0xa1, B: 0x4f, A: 0xff}, // green
	color.RGBA{R: 0xb0, G: 0x7a, B: 0xa1, A: 0xff}, // purple
	color.RGBA{R: 0x9c, G: 0x75, B: 0x5f, A: 0xff}, // brown
	color.RGBA{R: 0xed, G: 0xc9, B: 0x48, A: 0xff}, // yellow
	color.RGBA{R: 0xff, G: 0x9d, B: 0xa7, A: 0xff}, // pink
	color.RGBA{R: 0xba, G: 0xb0, B: 0xac, A: 0xff}, // grey
}

const strongColours = 7

// seriesStyle is how one labelled series is drawn.
type seriesStyle struct {
	colour color.Color
	dashes []vg.Length
	shape  draw.GlyphDrawer
}

// seriesStyles styles the labelled series of one plot. A label's colour
// is picked from the label itself, so that the same series ("unix raw",
// "logging") has the same colour in every plot of a report without the
// plots sharing state; a label whose colour another series of this plot
// already holds moves on to the next colour held least often, strong
// colours before pale ones. Once all
// ten colours are in use they repeat with a dash pattern and a marker of
// their own, so no two series of a plot look alike.
func seriesStyles(labels []string) []seriesStyle {
	held := make([]int, len(palette))
	out := make([]seriesStyle, len(labels))
	for i, label := range labels {
		fewest := slicesMin(held)
		c := 0
		for _, c = range colourOrder(preferredColour(label)) {
			if held[c] == fewest {
				break
			}
		}
		round := held[c]
		held[c]++
		out[i] = seriesStyle{
			colour: palette[c],
			dashes: plotutil.Dashes(round),
			shape:  plotutil.Shape(c + round*len(palette)),
		}
	}
	return out
}

// preferredColour is the strong colour a label gets when it is free.
func preferredColour(label string) int {
	h := fnv.New32a()
	h.Write([]byte(label))
	return int(h.Sum32() % strongColours)
}

// colourOrder lists the palette's indices in the order a label tries
// them: the strong colours from its preferred one on, then the pale ones.
func colourOrder(preferred int) []int {
	order := make([]int, 0, len(palette))
	for i := range strongColours {
		order = append(order, (preferred+i)%strongColours)
	}
	for i := strongColours; i < len(palette); i++ {
		order = append(order, i)
	}
	return order
}

func slicesMin(v []int) int {
	m := v[0]
	for _, x := range v[1:] {
		m = min(m, x)
	}
	return m
}

// legendGap separates a legend from the plot it explains.
const legendGap = vg.Length(8)

// legendBesideMax is the largest share of the width a legend may take
// beside the plot; a wider one goes below it, so that the data keep most
// of the width.
const legendBesideMax = 0.35

// plotLayout places a plot and its legend on one canvas: the legend
// never shares space with the plot, so it cannot cover a curve or a bar.
type plotLayout struct {
	size   vg.Point     // of the whole canvas
	plot   vg.Rectangle // title, axes and data
	legend vg.Rectangle // empty when the plot has no legend
}

// layoutLegend puts a legend of size legend to the right of a w×h plot,
// top-aligned, or below it when it is too wide to sit beside; below, the
// canvas grows by the legend's height rather than squeezing the plot.
func layoutLegend(w, h vg.Length, legend vg.Point) plotLayout {
	if legend.X <= 0 || legend.Y <= 0 {
		return plotLayout{size: vg.Point{X: w, Y: h}, plot: vg.Rectangle{Max: vg.Point{X: w, Y: h}}}
	}
	if legend.X <= vg.Length(legendBesideMax)*w {
		H := max(h, legend.Y+legendGap)
		return plotLayout{
			size:   vg.Point{X: w, Y: H},
			plot:   vg.Rectangle{Min: vg.Point{Y: H - h}, Max: vg.Point{X: w - legend.X - legendGap, Y: H}},
			legend: vg.Rectangle{Min: vg.Point{X: w - legend.X, Y: H - legendGap - legend.Y}, Max: vg.Point{X: w, Y: H - legendGap}},
		}
	}
	H := h + legend.Y + legendGap
	return plotLayout{
		size:   vg.Point{X: w, Y: H},
		plot:   vg.Rectangle{Min: vg.Point{Y: legend.Y + legendGap}, Max: vg.Point{X: w, Y: H}},
		legend: vg.Rectangle{Min: vg.Point{X: legendGap}, Max: vg.Point{X: legendGap + legend.X, Y: legend.Y}},
	}
}

func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// logTicks puts a tick at every m×10^k on a log axis and labels the
// powers of ten alone when that gives three labels or more, else 1, 2 and
// 5 times them, else every tick. gonum's LogTicks labels powers of ten
// only, which left a curve between 20 and 80 µs with no labelled tick.
type logTicks struct{}

// logTickLabels are the mantissas labelled, sparsest first.
var logTickLabels = [][]int{{1}, {1, 2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9}}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) || math.IsInf(hi, 0) {
		return nil
	}
	type mark struct{ m, e int }
	var marks []mark
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		for m := 1; m <= 9; m++ {
			if v := float64(m) * math.Pow10(e); v >= lo && v <= hi {
				marks = append(marks, mark{m, e})
			}
		}
	}
	var labelled []int
	for _, labelled = range logTickLabels {
		n := 0
		for _, mk := range marks {
			if slices.Contains(labelled, mk.m) {
				n++
			}
		}
		if n >= 3 {
			break
		}
	}
	ts := make([]plot.Tick, len(marks))
	for i, mk := range marks {
		ts[i].Value = float64(mk.m) * math.Pow10(mk.e)
		if slices.Contains(labelled, mk.m) {
			ts[i].Label = decimalLabel(mk.m, mk.e)
		}
	}
	return ts
}

// decimalLabel writes m×10^e without floating-point noise (0.3, not
// 0.30000000000000004).
func decimalLabel(m, e int) string {
	if e >= 0 {
		return strconv.Itoa(m) + strings.Repeat("0", e)
	}
	return strconv.FormatFloat(float64(m)*math.Pow10(e), 'f', -e, 64)
}

// ninesTicks labels a percentile axis whose x is nines(p): 50, 90, 99,
// 99.9, … labelled, 95, 99.5, 99.95, … as unlabelled ticks between them,
// as HdrHistogram's plots do.
type ninesTicks struct{}

func (ninesTicks) Ticks(lo, hi float64) []plot.Tick {
	const eps = 1e-6 // nines(99.999) is 4.999999999997
	var ts []plot.Tick
	add := func(p float64, label string) {
		if x := nines(p); x >= lo-eps && x <= hi+eps {
			ts = append(ts, plot.Tick{Value: x, Label: label})
		}
	}
	add(0, "0")
	add(50, "50")
	for k := 1; nines(ninesPercentile(k)) <= hi+eps; k++ {
		add(ninesPercentile(k), strconv.FormatFloat(ninesPercentile(k), 'f', max(0, k-2), 64))
		add(100-5*math.Pow10(1-k), "") // 95, 99.5, 99.95, …
	}
	return ts
}

// ninesPercentile is the percentile with k nines: 1 → 90, 3 → 99.9.
func ninesPercentile(k int) float64 { return 100 - math.Pow10(2-k) }

// linearTicks labels a linear axis every 1, 2 or 5 times a power of ten,
// about five labels over the range, with no more decimals than the step
// needs (gonum's wrote "2500.00" and "0.00").
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	e := int(math.Floor(math.Log10((hi - lo) / 5)))
	m := 1
	for _, cand := range []int{2, 5, 10} {
		if float64(m)*math.Pow10(e) >= (hi-lo)/5 {
			break
		}
		m = cand
	}
	if m == 10 {
		m, e = 1, e+1
	}
	step := float64(m) * math.Pow10(e)
	var ts []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi*(1+1e-9); i++ {
		v := i * step
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', max(0, -e), 64)})
		if mid := v + step/2; mid <= hi {
			ts = append(ts, plot.Tick{Value: mid})
		}
	}
	return ts
}
