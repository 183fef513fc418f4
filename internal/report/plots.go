package report

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/ipclab/logagg/internal/bench/tracebench"
)

// ErrNoData is returned (wrapped) when a plot has nothing to draw.
var ErrNoData = errors.New("no data to plot")

// renderSVG draws p into an SVG document and returns it without the XML
// prolog, ready to be inlined into HTML. Gonum panics on some degenerate
// inputs (a log axis reaching 0); a report must not die of one bad plot, so
// the panic becomes an error shown in the plot's place.
//
// The legend is drawn beside or below the plot, never inside it where
// gonum puts it: inside, it covered the curves it names. The SVG may
// therefore be taller than h (a wide legend below the plot).
func renderSVG(p *plot.Plot, w, h vg.Length) (svg []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %v", r)
		}
	}()
	sans(p)
	lay := legendLayout(p, w, h)
	legend := p.Legend
	p.Legend = plot.NewLegend()
	c := vgsvg.New(lay.size.X, lay.size.Y)
	dc := draw.New(c)
	p.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: lay.plot})
	if lay.legend != (vg.Rectangle{}) {
		legend.Top, legend.Left = true, true
		legend.XOffs, legend.YOffs = 0, 0
		legend.Draw(draw.Canvas{Canvas: dc.Canvas, Rectangle: lay.legend})
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return nil, err
	}
	out := b.Bytes()
	if i := bytes.Index(out, []byte("<svg")); i >= 0 {
		out = out[i:]
	}
	return out, nil
}

// legendLayout is where renderSVG puts p and its legend on a w×h plot.
// gonum's measure of a legend leaves out the last entry's descenders;
// legendGap more keeps them on the canvas.
func legendLayout(p *plot.Plot, w, h vg.Length) plotLayout {
	size := p.Legend.Rectangle(draw.Canvas{}).Size()
	if size.Y > 0 {
		size.Y += legendGap
	}
	lay := layoutLegend(w, h, size)
	// gonum centres the last x tick label on the axis' end, so half of it
	// hangs past the plot; when nothing is beside the plot, that would
	// be past the canvas.
	if lay.plot.Max.X == lay.size.X {
		lay.plot.Max.X -= rightMargin
	}
	return lay
}

// rightMargin is room for half the widest last x tick label ("99.999").
const rightMargin = vg.Length(14)

// sans switches a plot's text to Liberation Sans (gonum's default is the
// serif), to match the page; the metrics come from gonum's bundled fonts,
// so labels fit whatever fonts the viewer has. The legend's text gets the
// tick labels' size: it sits beside the plot and takes width from it.
func sans(p *plot.Plot) {
	for _, ts := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		ts.Font.Variant = "Sans"
	}
	p.Legend.TextStyle.Font.Size = p.X.Tick.Label.Font.Size
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	return p
}

// nBins picks a histogram bin count: Freedman–Diaconis would be better on
// heavy tails, but seed 004's plots use a fixed, fine binning; sqrt(n)
// capped to 100 is close and needs no quantiles.
func nBins(n int) int {
	return max(5, min(100, int(math.Sqrt(float64(n)))))
}

// The colours of one distribution's plots: its body and its outliers.
var (
	bodyColour    = palette[0]
	outlierColour = palette[2]
)

const (
	// wideSpan is the ratio of largest to smallest value beyond which a
	// histogram's bins are log-spaced: on linear bins a tail of 10× the
	// median fills one bar and leaves the rest of the plot empty.
	wideSpan = 3
	// binsPerDecade is the resolution of log-spaced bins: with 20 per
	// factor of ten, each bin is 12 % wider than the one before.
	binsPerDecade = 20
)

// histogram counts v, in µs of quantity and all within [lo, hi], into
// bins: log-spaced on a log x axis when they span more than wideSpan,
// linear otherwise. logCount makes the count axis logarithmic too, so
// that a bin of one sample shows next to one of thousands.
func histogram(title, quantity string, v []float64, lo, hi float64, col color.Color, logCount bool) (*plot.Plot, error) {
	if len(v) == 0 {
		return nil, ErrNoData
	}
	p := newPlot(title, quantity+" (µs)", "count")
	var h *plotter.Histogram
	if lo > 0 && hi/lo > wideSpan {
		h = &plotter.Histogram{Bins: logBins(lo, hi, v), LineStyle: plotter.DefaultLineStyle}
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, logTicks{}
		p.X.Label.Text = quantity + " (µs, log)"
	} else {
		var err error
		if h, err = plotter.NewHist(plotter.Values(v), nBins(len(v))); err != nil {
			return nil, err
		}
		p.X.Tick.Marker = linearTicks{}
	}
	h.FillColor = col
	h.LineStyle.Width = vg.Points(0.3)
	p.Add(h)
	p.Y.Tick.Marker = linearTicks{}
	if logCount {
		h.LogY = true
		most := 0.0
		for _, b := range h.Bins {
			most = math.Max(most, b.Weight)
		}
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, countTicks{}
		p.Y.Label.Text += " (log)"
		// A bin of one sample still shows as a bar above the axis.
		p.Y.Min, p.Y.Max = 0.5, math.Max(2, most*1.5)
	}
	return p, nil
}

// logBins counts v into n log-spaced bins covering [lo, hi]; lo > 0.
func logBins(lo, hi float64, v []float64) []plotter.HistogramBin {
	n := int(math.Ceil(math.Log10(hi/lo) * binsPerDecade))
	n = max(5, min(nBins(len(v)), n))
	ratio := math.Pow(hi/lo, 1/float64(n))
	bins := make([]plotter.HistogramBin, n)
	for i := range bins {
		bins[i].Min = lo * math.Pow(ratio, float64(i))
		bins[i].Max = lo * math.Pow(ratio, float64(i+1))
	}
	for _, x := range v {
		i := int(math.Floor(math.Log(x/lo) / math.Log(ratio)))
		bins[max(0, min(n-1, i))].Weight++
	}
	return bins
}

// countTicks labels a log count axis at whole counts only.
type countTicks struct{}

func (countTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := logTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Value < 1 {
			ts[i].Label = ""
		}
	}
	return ts
}

// mainHistogram is seed 004's main histogram: the body of the
// distribution, up to p99, in µs.
func mainHistogram(name string, ns []float64, q99 float64) (*plot.Plot, error) {
	var v []float64
	lo := math.Inf(1)
	for _, x := range ns {
		if x <= q99 {
			v = append(v, x/1e3)
			lo = math.Min(lo, x/1e3)
		}
	}
	return histogram(fmt.Sprintf("%s: main histogram (≤ p99 = %s µs)", name, fmtUs(q99)), "round trip", v, lo, q99/1e3, bodyColour, false)
}

// outlierHistogram is seed 004's outlier histogram: what lies above p99.
// Outliers span orders of magnitude (a 20 µs p99 and a 30 ms stall), and
// their counts too (hundreds just above p99, one at the top), so the count
// axis is logarithmic and the bins log-spaced: on linear axes every
// outlier but the nearest sat in one bar and the stall was invisible.
func outlierHistogram(name string, ns []float64, q99 float64) (*plot.Plot, error) {
	var v []float64
	for _, x := range ns {
		if x > q99 {
			v = append(v, x/1e3)
		}
	}
	if len(v) == 0 {
		// Still a plot: an empty outlier histogram is a finding.
		p := newPlot(name+": no samples above p99", "round trip (µs)", "count")
		p.X.Min, p.X.Max, p.Y.Min, p.Y.Max = q99/1e3, q99/1e3*2, 0, 1
		return p, nil
	}
	return histogram(fmt.Sprintf("%s: outliers (> p99, n=%d)", name, len(v)), "round trip", v, q99/1e3, slices.Max(v), outlierColour, true)
}

// maxBuckets bounds the points of a time series: seed 004 ran a million
// iterations, which as SVG would be a million elements. Consecutive
// samples are grouped into at most this many buckets, and each bucket
// keeps its minimum, median and maximum, so every outlier stays visible.
const maxBuckets = 1000

// seriesBucket is one run of consecutive samples of a time series.
type seriesBucket struct {
	first         int // the iteration of its first sample
	lo, med, peak float64
}

// decimate groups ns, in order, into at most buckets runs of equal length
// and summarises each; samples that a log axis cannot show (≤ 0, NaN) are
// left out, and a run of only those gives no bucket.
func decimate(ns []float64, buckets int) (size int, out []seriesBucket) {
	size = max(1, (len(ns)+buckets-1)/buckets)
	buf := make([]float64, 0, size)
	for start := 0; start < len(ns); start += size {
		buf = buf[:0]
		for _, x := range ns[start:min(start+size, len(ns))] {
			if x > 0 {
				buf = append(buf, x)
			}
		}
		if len(buf) == 0 {
			continue
		}
		slices.Sort(buf)
		out = append(out, seriesBucket{first: start, lo: buf[0], med: buf[len(buf)/2], peak: buf[len(buf)-1]})
	}
	return size, out
}

// timeSeries draws the samples in the order they were taken, on a log y
// axis (a stall of 1000× the median shares the plot with the body). Up to
// maxBuckets samples are drawn as points; more are decimated: a band from
// each bucket's minimum to its maximum, its median as a line, and its
// maximum as a point, so the SVG stays small and no spike is lost.
func timeSeries(name string, ns []float64) (*plot.Plot, error) {
	size, buckets := decimate(ns, maxBuckets)
	if len(buckets) == 0 {
		return nil, ErrNoData
	}
	lo, hi := math.Inf(1), 0.0
	peaks := make(plotter.XYs, len(buckets))
	meds := make(plotter.XYs, len(buckets))
	band := make(plotter.XYs, 2*len(buckets))
	for i, b := range buckets {
		x := float64(b.first)
		peaks[i] = plotter.XY{X: x, Y: b.peak / 1e3}
		meds[i] = plotter.XY{X: x, Y: b.med / 1e3}
		// The band's outline: along the maxima, back along the minima.
		band[i] = peaks[i]
		band[len(band)-1-i] = plotter.XY{X: x, Y: b.lo / 1e3}
		lo, hi = math.Min(lo, b.lo/1e3), math.Max(hi, b.peak/1e3)
	}
	title := name + ": time series"
	if size > 1 {
		title += fmt.Sprintf(" (min, median, max of every %d samples)", size)
	}
	p := newPlot(title, "iteration", "round trip (µs, log)")
	sc, err := plotter.NewScatter(peaks)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Radius = vg.Points(1)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Color = outlierColour
	if size == 1 {
		sc.GlyphStyle.Color = bodyColour
		p.Add(sc)
	} else {
		poly, err := plotter.NewPolygon(band)
		if err != nil {
			return nil, err
		}
		r, g, b, _ := bodyColour.RGBA()
		poly.Color = color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 0x40}
		poly.LineStyle.Width = 0
		ln, err := plotter.NewLine(meds)
		if err != nil {
			return nil, err
		}
		ln.LineStyle.Color = bodyColour
		ln.LineStyle.Width = vg.Points(0.8)
		p.Add(poly, ln, sc)
		p.Legend.Add("max of a bucket", sc)
		p.Legend.Add("median", ln)
		p.Legend.Add("min to max", poly)
	}
	setLogY(p, lo, hi)
	p.X.Min, p.X.Max = 0, float64(len(ns))
	return p, nil
}

func fmtUs(ns float64) string { return strconv.FormatFloat(ns/1e3, 'f', 2, 64) }

// curve is one labelled line of (x, y) points.
type curve struct {
	label string
	pts   [][2]float64
}

// nines maps a percentile to its number of nines: 90 → 1, 99 → 2, 99.9 → 3.
func nines(p float64) float64 { return -math.Log10(1 - p/100) }

// percentileCurves draws latency against percentile as HdrHistogram does:
// x is the number of nines (50, 90, 99, 99.9, … equally spaced, so the
// tail gets as much room as the body) and y is logarithmic (the tail
// spans orders of magnitude). The x axis ends at the first tick at or
// beyond the curves' highest percentile, and not before p99.
func percentileCurves(title string, cs []curve) (*plot.Plot, error) {
	p := newPlot(title, "percentile", "latency (µs, log)")
	xlo, xhi := nines(50), 0.0
	ylo, yhi := math.Inf(1), 0.0
	var labels []string
	var lines []plotter.XYs
	for _, c := range cs {
		var xy plotter.XYs
		for _, pt := range c.pts {
			if pt[1] <= 0 || pt[0] < 0 || pt[0] >= 100 || math.IsNaN(pt[1]) || math.IsInf(pt[1], 0) {
				continue // a log axis cannot show 0, nor x p100; the table has them
			}
			x := nines(pt[0])
			xy = append(xy, plotter.XY{X: x, Y: pt[1]})
			xlo, xhi = math.Min(xlo, x), math.Max(xhi, x)
			ylo, yhi = math.Min(ylo, pt[1]), math.Max(yhi, pt[1])
		}
		if len(xy) > 0 {
			labels = append(labels, c.label)
			lines = append(lines, xy)
		}
	}
	if len(lines) == 0 {
		return nil, ErrNoData
	}
	if err := addStyledLines(p, labels, lines); err != nil {
		return nil, err
	}
	p.X.Tick.Marker = ninesTicks{}
	p.X.Min, p.X.Max = xlo, nextNinesTick(math.Max(xhi, nines(99)))
	setLogY(p, ylo, yhi)
	return p, nil
}

// nextNinesTick is the x of the first tick of a nines axis at or after x.
func nextNinesTick(x float64) float64 {
	if ts := (ninesTicks{}).Ticks(x-1e-6, x+1); len(ts) > 0 {
		return ts[0].Value // the ticks come in increasing order
	}
	return x
}

// addStyledLines adds one line with markers per label, each in its own
// style, and names it in the legend.
func addStyledLines(p *plot.Plot, labels []string, lines []plotter.XYs) error {
	for i, st := range seriesStyles(labels) {
		l, s, err := plotter.NewLinePoints(lines[i])
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = st.colour, st.dashes, vg.Points(1.3)
		s.Color, s.Shape, s.Radius = st.colour, st.shape, vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(labels[i], l, s)
	}
	return nil
}

// setLogY makes p's y axis logarithmic over [lo, hi], lo > 0.
func setLogY(p *plot.Plot, lo, hi float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	// A margin so points do not sit on the frame, keeping Min > 0 so the
	// log scale is defined.
	p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
}

// logLogLines draws curves on log x and log y axes (buffer sweeps span
// 1 B to 1 MiB). The legend goes beside or below the plot whatever the
// last argument (it used to pick the corner the legend covered).
func logLogLines(title, xlabel, ylabel string, cs []curve, _ bool) (*plot.Plot, error) {
	p := newPlot(title, xlabel, ylabel)
	xlo, xhi, ylo, yhi := math.Inf(1), 0.0, math.Inf(1), 0.0
	var labels []string
	var lines []plotter.XYs
	for _, c := range cs {
		var xy plotter.XYs
		for _, pt := range c.pts {
			if pt[0] <= 0 || pt[1] <= 0 || math.IsInf(pt[0], 0) || math.IsInf(pt[1], 0) || math.IsNaN(pt[0]) || math.IsNaN(pt[1]) {
				continue
			}
			xy = append(xy, plotter.XY{X: pt[0], Y: pt[1]})
			xlo, xhi = math.Min(xlo, pt[0]), math.Max(xhi, pt[0])
			ylo, yhi = math.Min(ylo, pt[1]), math.Max(yhi, pt[1])
		}
		if len(xy) > 0 {
			labels = append(labels, c.label)
			lines = append(lines, xy)
		}
	}
	if len(lines) == 0 {
		return nil, ErrNoData
	}
	if err := addStyledLines(p, labels, lines); err != nil {
		return nil, err
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.X.Min, p.X.Max = xlo/1.5, xhi*1.5
	setLogY(p, ylo, yhi)
	return p, nil
}

// sizeTicks marks a log byte axis at powers of 4 (1, 4, 16, … 1M) and
// labels them all when they are few, else every other one (1, 16, 256, …):
// eleven labels from 1 B to 1 MiB ran into each other on a half-width plot.
type sizeTicks struct{}

// maxSizeLabels is the most labels a size axis gets.
const maxSizeLabels = 7

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := 1.0; v <= hi && v < 1<<50; v *= 4 {
		if v >= lo {
			ts = append(ts, plot.Tick{Value: v, Label: tracebench.HumanInt(int64(v))})
		}
	}
	if len(ts) > maxSizeLabels {
		for i := range ts {
			if math.Mod(math.Log2(ts[i].Value), 4) != 0 {
				ts[i].Label = ""
			}
		}
	}
	return ts
}

// barGroup is one colour of a grouped bar chart: one value per category.
type barGroup struct {
	name string
	vals []float64
}

// groupedBars draws categories along x with one bar per group in each.
// width is the canvas width, used to size the bars so they fit.
func groupedBars(title, ylabel string, cats []string, groups []barGroup, width vg.Length) (*plot.Plot, error) {
	if len(cats) == 0 || len(groups) == 0 {
		return nil, ErrNoData
	}
	p := newPlot(title, "", ylabel)
	avail := (width - 1.2*vg.Inch) * 0.75
	bw := avail / vg.Length(len(cats)*len(groups))
	bw = min(bw, vg.Points(28))
	names := make([]string, len(groups))
	for i, g := range groups {
		names[i] = g.name
	}
	styles := seriesStyles(names)
	for i, g := range groups {
		vals := make(plotter.Values, len(cats))
		for j := range cats {
			if j < len(g.vals) && !math.IsNaN(g.vals[j]) && !math.IsInf(g.vals[j], 0) && g.vals[j] > 0 {
				vals[j] = g.vals[j]
			}
		}
		b, err := plotter.NewBarChart(vals, bw)
		if err != nil {
			return nil, err
		}
		b.Color = styles[i].colour
		b.LineStyle.Width = vg.Points(0.3)
		b.Offset = bw * (vg.Length(i) - vg.Length(len(groups)-1)/2)
		p.Add(b)
		if len(groups) > 1 {
			p.Legend.Add(g.name, b)
		}
	}
	p.NominalX(cats...)
	// Room for the outer bars of the first and last group.
	p.X.Min, p.X.Max = -0.6, float64(len(cats))-0.4
	if len(cats) > 4 {
		p.X.Tick.Label.Rotation = math.Pi / 7
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	p.Y.Min = 0
	// Headroom, so the tallest bar does not run into the title.
	top := 0.0
	for _, g := range groups {
		for _, v := range g.vals {
			if !math.IsInf(v, 0) && !math.IsNaN(v) {
				top = math.Max(top, v)
			}
		}
	}
	if top > 0 {
		p.Y.Max = top * 1.08
	}
	p.Y.Tick.Marker = linearTicks{}
	return p, nil
}
