package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/ipclab/logagg/internal/bench/tracebench"
)

// errOlderTrace marks trace rows without the typed fields this version
// writes: results of an ipcbench before typed trace rows.
var errOlderTrace = errors.New("not the typed trace rows this ipcbench writes (written by an older ipcbench? rerun `ipcbench trace`)")

// maxDotKeys bounds the keys of a matrix's dot plot; its table lists all.
const maxDotKeys = 20

// traceSection renders `ipcbench trace`: the same tables as the terminal
// (tracebench.Tables), a dot plot per matrix so that transports compare at
// a glance, one plot per histogram key with the transports overlaid, and
// printf output collapsed.
func traceSection(s *section, in *Input) error {
	var rows []tracebench.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return fmt.Errorf("%w: %w", errOlderTrace, err)
	}
	if slices.ContainsFunc(rows, func(r tracebench.Row) bool { return r.Side == "" }) {
		return errOlderTrace
	}
	for _, t := range tracebench.Tables(rows) {
		s.tables = append(s.tables, table{t.Title, t.Table})
	}
	for _, m := range tracebench.Matrices(rows) {
		if len(m.Keys) > 1 {
			s.plots = append(s.plots, matrixPlot(m))
		}
	}
	s.plots = append(s.plots, histPlots(rows)...)
	for _, r := range rows {
		if len(r.Printf) > 0 {
			s.details = append(s.details, pre{fmt.Sprintf("%s %s %s: printf output (%d of %d lines)", r.Transport, r.Script, r.Side, len(r.Printf), r.PrintfLines),
				strings.TrimRight(strings.Join(r.Printf, ""), "\n")})
		}
	}
	return nil
}

func matrixPlot(m tracebench.Matrix) *plotSpec {
	n := min(len(m.Keys), maxDotKeys)
	what := "key of " + m.Map
	if m.Map == "@syscalls" {
		what = "syscall"
	}
	title := m.Title
	if n < len(m.Keys) {
		title += fmt.Sprintf(" (top %d of %d)", n, len(m.Keys))
	}
	return &plotSpec{
		title: title,
		reading: "One line per " + what + ", largest first; one marker per transport at how many times it happened per record sent, on a log axis (each grid line is ×10). " +
			"Markers far apart on a line are where transports differ; a missing marker is a call that transport never made.",
		w: wideW, h: vg.Length(n)*0.24*vg.Inch + 1.1*vg.Inch, wide: true,
		draw: func() (*plot.Plot, error) { return dotMatrix(m, n) },
	}
}

// dotMatrix draws the first n keys of m as a dot plot: keys down the y
// axis (the first at the top), per record on a log x axis, one colour and
// shape per column, nudged apart vertically so equal values stay visible.
func dotMatrix(m tracebench.Matrix, n int) (*plot.Plot, error) {
	p := newPlot("", "per record (log)", "")
	lo, hi := math.Inf(1), 0.0
	for c, col := range m.Columns {
		var xy plotter.XYs
		nudge := 0.5 * (float64(c) - float64(len(m.Columns)-1)/2) / float64(len(m.Columns))
		for k := range n {
			v := m.PerRecord[k][c]
			if math.IsNaN(v) || v <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: v, Y: float64(n-1-k) + nudge})
			lo, hi = min(lo, v), max(hi, v)
		}
		if len(xy) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle.Color = plotutil.Color(c)
		sc.GlyphStyle.Shape = plotutil.Shape(c)
		sc.GlyphStyle.Radius = vg.Points(3)
		p.Add(sc)
		p.Legend.Add(col, sc)
	}
	if hi == 0 {
		return nil, ErrNoData
	}
	labels := make([]string, n)
	for k := range n {
		labels[n-1-k] = m.Keys[k]
	}
	p.NominalY(labels...)
	p.Y.Min, p.Y.Max = -0.6, float64(n)-0.4
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.X.Min, p.X.Max = lo/2, hi*2
	// Keys are sorted largest first, so the bottom right (small keys,
	// large values) is where the markers are fewest.
	p.Legend.Top, p.Legend.Left = false, false
	return p, nil
}

// histPlots draws one plot per (script, side, histogram, key) with every
// transport's buckets as a line, per record, on log axes.
func histPlots(rows []tracebench.Row) []*plotSpec {
	type id struct {
		script string
		side   tracebench.Target
		name   string
		key    string
	}
	var order []id
	curves := map[id][]curve{}
	for _, r := range rows {
		if r.Records <= 0 {
			continue
		}
		for _, h := range r.Hists {
			k := id{r.Script, r.Side, h.Name, h.Key}
			c := curve{label: fmt.Sprintf("%s %dB", r.Transport, r.Size)}
			for _, b := range h.Buckets {
				if b.Count == 0 || b.Hi <= 0 {
					continue // a log axis has no room for zero or below
				}
				hi := b.Hi
				if hi == math.MaxInt64 {
					hi = 2 * b.Lo // an open top bucket, drawn one doubling wide
				}
				c.pts = append(c.pts, [2]float64{float64(hi), float64(b.Count) / float64(r.Records)})
			}
			if len(c.pts) == 0 {
				continue
			}
			if curves[k] == nil {
				order = append(order, k)
			}
			curves[k] = append(curves[k], c)
		}
	}
	var out []*plotSpec
	for _, k := range order {
		name := k.name
		if k.key != "" {
			name += "[" + k.key + "]"
		}
		title := fmt.Sprintf("%s %s, %s side", k.script, name, k.side)
		cs := curves[k]
		out = append(out, &plotSpec{
			title: title,
			reading: "bpftrace's power-of-two buckets, one line per transport: x is each bucket's upper bound (log; ns for the *_ns histograms), " +
				"y how many samples fell in it per record sent (log). A line further right is slower; a second hump is a second way the call ends (e.g. parked vs woken at once).",
			w: halfW, h: halfH,
			draw: func() (*plot.Plot, error) {
				return logLogLines(title, "bucket upper bound", "samples per record", cs, false)
			},
		})
	}
	return out
}

// overheadSection renders `ipcbench trace --overhead`: the same summary
// and difference tables as the terminal, seed 002's table for each state's
// median run, and the states' one-way percentile curves overlaid.
func overheadSection(s *section, in *Input) error {
	var rows []tracebench.OverheadRow
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	for _, t := range tracebench.OverheadTables(rows) {
		s.tables = append(s.tables, table{t.Title, t.Table})
	}
	var b strings.Builder
	if err := tracebench.WriteMedianRuns(&b, rows); err == nil && b.Len() > 0 {
		s.details = append(s.details, pre{"median runs in seed 002's format", strings.TrimRight(b.String(), "\n")})
	}
	var curves []curve
	for _, st := range tracebench.SummarizeOverhead(rows) {
		if st.MedianRun == nil {
			continue
		}
		if c := curveOf(st.State, &st.MedianRun.Latency.OneWay); len(c.pts) > 0 {
			curves = append(curves, c)
		}
	}
	if len(curves) > 0 {
		s.plots = append(s.plots, &plotSpec{title: "one-way latency percentiles per tracer state (median run of each)",
			reading: "One line per tracer state (its median run): one-way latency (log) against percentile on a nines axis. A line above \"none\" is what tracing costs at that percentile.",
			w:       wideW, h: wideH + 0.6*vg.Inch, wide: true,
			draw: func() (*plot.Plot, error) { return percentileCurves("One way, per tracer state", curves) }})
	}
	return nil
}
