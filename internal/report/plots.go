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
	"gonum.org/v1/plot/plotutil"
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
func renderSVG(p *plot.Plot, w, h vg.Length) (svg []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot: %v", r)
		}
	}()
	sans(p)
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
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

// sans switches a plot's text to Liberation Sans (gonum's default is the
// serif), to match the page; the metrics come from gonum's bundled fonts,
// so labels fit whatever fonts the viewer has.
func sans(p *plot.Plot) {
	for _, ts := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		ts.Font.Variant = "Sans"
	}
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

func histPlot1(title, xlabel string, vals plotter.Values, col color.Color) (*plot.Plot, error) {
	if len(vals) == 0 {
		return nil, ErrNoData
	}
	p := newPlot(title, xlabel, "count")
	h, err := plotter.NewHist(vals, nBins(len(vals)))
	if err != nil {
		return nil, err
	}
	h.FillColor = col
	h.LineStyle.Width = vg.Points(0.3)
	p.Add(h)
	return p, nil
}

// mainHistogram is seed 004's main histogram: the body of the
// distribution, up to p99, in µs.
func mainHistogram(name string, ns []float64, q99 float64) (*plot.Plot, error) {
	var v plotter.Values
	for _, x := range ns {
		if x <= q99 {
			v = append(v, x/1e3)
		}
	}
	return histPlot1(fmt.Sprintf("%s: main histogram (≤ p99 = %s µs)", name, fmtUs(q99)), "round trip (µs)", v, color.RGBA{R: 70, G: 120, B: 190, A: 255})
}

// outlierHistogram is seed 004's outlier histogram: what lies above p99.
func outlierHistogram(name string, ns []float64, q99 float64) (*plot.Plot, error) {
	var v plotter.Values
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
	return histPlot1(fmt.Sprintf("%s: outliers (> p99, n=%d)", name, len(v)), "round trip (µs)", v, color.RGBA{R: 200, G: 80, B: 60, A: 255})
}

// maxPoints bounds the points of a time series: seed 004 ran a million
// iterations, which as SVG would be a million elements. Each bin keeps its
// maximum (so every outlier stays visible) and its median (the body).
const maxPoints = 1500

func timeSeries(name string, ns []float64) (*plot.Plot, error) {
	if len(ns) == 0 {
		return nil, ErrNoData
	}
	binSize := (len(ns) + maxPoints - 1) / maxPoints
	var maxes, meds plotter.XYs
	buf := make([]float64, 0, binSize)
	for start := 0; start < len(ns); start += binSize {
		end := min(start+binSize, len(ns))
		buf = append(buf[:0], ns[start:end]...)
		slices.Sort(buf)
		x := float64(start)
		maxes = append(maxes, plotter.XY{X: x, Y: buf[len(buf)-1] / 1e3})
		meds = append(meds, plotter.XY{X: x, Y: buf[len(buf)/2] / 1e3})
	}
	title := name + ": time series"
	if binSize > 1 {
		title += fmt.Sprintf(" (max and median of every %d samples)", binSize)
	}
	p := newPlot(title, "iteration", "round trip (µs)")
	sc, err := plotter.NewScatter(maxes)
	if err != nil {
		return nil, err
	}
	sc.GlyphStyle.Radius = vg.Points(1.2)
	sc.GlyphStyle.Shape = draw.CircleGlyph{}
	sc.GlyphStyle.Color = color.RGBA{R: 200, G: 80, B: 60, A: 255}
	ln, err := plotter.NewLine(meds)
	if err != nil {
		return nil, err
	}
	ln.LineStyle.Color = color.RGBA{R: 70, G: 120, B: 190, A: 255}
	ln.LineStyle.Width = vg.Points(1)
	if binSize > 1 {
		p.Add(sc, ln)
		p.Legend.Add("max per bin", sc)
		p.Legend.Add("median per bin", ln)
	} else {
		// Every sample is a point; the thin line shows the order.
		ln.LineStyle.Width = vg.Points(0.4)
		p.Add(ln, sc)
	}
	p.Legend.Top = true
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

var ninesTicks = []float64{50, 90, 99, 99.9, 99.99, 99.999}

// percentileCurves draws latency against percentile on a "nines" x axis
// and a log y axis (the tails span orders of magnitude).
func percentileCurves(title string, cs []curve) (*plot.Plot, error) {
	p := newPlot(title, "percentile", "latency (µs)")
	var ticks plot.ConstantTicks
	for _, q := range ninesTicks {
		ticks = append(ticks, plot.Tick{Value: nines(q), Label: strconv.FormatFloat(q, 'f', -1, 64)})
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = nines(50), nines(99.999)
	n := 0
	lo, hi := math.Inf(1), 0.0
	for i, c := range cs {
		var xy plotter.XYs
		for _, pt := range c.pts {
			if pt[1] <= 0 || pt[0] >= 100 || math.IsNaN(pt[1]) || math.IsInf(pt[1], 0) {
				continue // a log axis cannot show 0; the table has it
			}
			xy = append(xy, plotter.XY{X: nines(pt[0]), Y: pt[1]})
			lo, hi = math.Min(lo, pt[1]), math.Max(hi, pt[1])
		}
		if len(xy) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		l.Width = vg.Points(1.3)
		s.Color = plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		s.Radius = vg.Points(2)
		p.Add(l, s)
		p.Legend.Add(c.label, l, s)
		n++
	}
	if n == 0 {
		return nil, ErrNoData
	}
	setLogY(p, lo, hi)
	p.Legend.Top = true
	p.Legend.Left = true
	return p, nil
}

func setLogY(p *plot.Plot, lo, hi float64) {
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	// Pad to whole decades' edges so lines do not sit on the frame, and
	// keep Min > 0 so the log scale is defined.
	p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
}

// logLogLines draws curves on log x and log y axes (buffer sweeps span
// 1 B to 1 MiB).
func logLogLines(title, xlabel, ylabel string, cs []curve, legendLeft bool) (*plot.Plot, error) {
	p := newPlot(title, xlabel, ylabel)
	n := 0
	xlo, xhi, ylo, yhi := math.Inf(1), 0.0, math.Inf(1), 0.0
	for i, c := range cs {
		var xy plotter.XYs
		for _, pt := range c.pts {
			if pt[0] <= 0 || pt[1] <= 0 || math.IsInf(pt[0], 0) || math.IsInf(pt[1], 0) || math.IsNaN(pt[0]) || math.IsNaN(pt[1]) {
				continue
			}
			xy = append(xy, plotter.XY{X: pt[0], Y: pt[1]})
			xlo, xhi = math.Min(xlo, pt[0]), math.Max(xhi, pt[0])
			ylo, yhi = math.Min(ylo, pt[1]), math.Max(yhi, pt[1])
		}
		if len(xy) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(c.label, l, s)
		n++
	}
	if n == 0 {
		return nil, ErrNoData
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks{}
	p.X.Min, p.X.Max = xlo/1.5, xhi*1.5
	setLogY(p, ylo, yhi)
	p.Legend.Top = true
	p.Legend.Left = legendLeft
	return p, nil
}

// sizeTicks labels a log byte axis at powers of 4 (1, 4, 16, ... 1M).
type sizeTicks struct{}

func (sizeTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for v := 1.0; v <= hi*4 && v < 1<<50; v *= 4 {
		if v >= lo/4 {
			ts = append(ts, plot.Tick{Value: v, Label: tracebench.HumanInt(int64(v))})
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
		b.Color = plotutil.Color(i)
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
	p.Legend.Top = true
	return p, nil
}
