package report

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/bufsweep"
	"github.com/ipclab/logagg/internal/bench/calibrate"
	"github.com/ipclab/logagg/internal/bench/conns"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/rtt"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/bench/tracebench"
)

// Plot sizes: two half-width plots side by side, or one wide plot.
const (
	halfW = 5 * vg.Inch
	halfH = 3.2 * vg.Inch
	wideW = 10 * vg.Inch
	wideH = 3.4 * vg.Inch
)

func calibrateTable(rows []calibrate.Row) *bench.Table {
	t := &bench.Table{Header: []string{"operation", "median", "min", "max", "unit", "how"}}
	for _, r := range rows {
		t.Add(r.Name, fmt.Sprintf("%.2f", r.Median), fmt.Sprintf("%.2f", r.Min), fmt.Sprintf("%.2f", r.Max), r.Unit, r.Source)
	}
	return t
}

// decodeRows decodes a result's rows; a null or absent rows field is an
// empty list, not an error (a run that measured nothing still has notes).
func decodeRows(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, v)
}

func rttSection(s *section, in *Input) error {
	var rows []rtt.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	t := &bench.Table{Header: []string{"mechanism", "size", "n", "mean", "median", "min", "max", "stddev",
		"q95", "q99", "q99.9", "q99.99", "go/c", "cs parent vol/inv", "cs child vol/inv"}}
	var ok []rtt.Row
	for _, r := range rows {
		if r.Error != "" {
			s.notes = append(s.notes, fmt.Sprintf("%s %s not measured: %s", r.Mechanism, bench.FormatSize(r.Size), r.Error))
			continue
		}
		ok = append(ok, r)
		st := r.Stats
		ratio := "-"
		if r.RatioToC > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToC)
		}
		csC := "-"
		if r.Child != nil {
			csC = fmt.Sprintf("%d/%d", r.Child.VolCS, r.Child.InvolCS)
		}
		t.Add(r.Mechanism, bench.FormatSize(r.Size), st.N, bench.FormatNs(st.Mean), bench.FormatNs(st.Median),
			bench.FormatNs(st.Min), bench.FormatNs(st.Max), bench.FormatNs(st.Stddev), bench.FormatNs(st.Q95),
			bench.FormatNs(st.Q99), bench.FormatNs(st.Q999), bench.FormatNs(st.Q9999), ratio,
			fmt.Sprintf("%d/%d", r.Parent.VolCS, r.Parent.InvolCS), csC)
	}
	s.tables = append(s.tables, table{"round trip per mechanism", t})
	if len(ok) == 0 {
		return nil
	}
	cats := make([]string, len(ok))
	med := make([]float64, len(ok))
	p99 := make([]float64, len(ok))
	for i, r := range ok {
		cats[i] = r.Mechanism + " " + bench.FormatSize(r.Size)
		med[i], p99[i] = r.Stats.Median/1e3, r.Stats.Q99/1e3
	}
	s.plots = append(s.plots, &plotSpec{title: "round trip per mechanism: median and p99 (µs)", w: wideW, h: wideH, wide: true,
		draw: func() (*plot.Plot, error) {
			return groupedBars("Round trip per mechanism", "µs", cats,
				[]barGroup{{"median", med}, {"p99", p99}}, wideW)
		}})
	return nil
}

func samplesSection(i int, sm *Samples) *section {
	s := &section{id: fmt.Sprintf("s%d-rtt-samples", i), title: "rtt samples: " + sm.Name, rank: rankOf("rtt-samples")}
	t := &bench.Table{Header: []string{"mechanism", "size", "samples", "median", "p99", "max", "above p99"}}
	for _, ser := range sm.Series {
		st := bench.Summarize(ser.Ns)
		above := 0
		for _, v := range ser.Ns {
			if v > st.Q99 {
				above++
			}
		}
		t.Add(ser.Mechanism, bench.FormatSize(ser.Size), st.N, bench.FormatNs(st.Median), bench.FormatNs(st.Q99), bench.FormatNs(st.Max), above)
		if st.N < 2 {
			s.notes = append(s.notes, fmt.Sprintf("%s %s: fewer than 2 samples, not plotted", ser.Mechanism, bench.FormatSize(ser.Size)))
			continue
		}
		name := ser.Mechanism + " " + bench.FormatSize(ser.Size)
		ser, q99 := ser, st.Q99
		s.plots = append(s.plots,
			&plotSpec{title: name + ": main histogram (samples ≤ p99)", w: halfW, h: halfH,
				draw: func() (*plot.Plot, error) { return mainHistogram(name, ser.Ns, q99) }},
			&plotSpec{title: name + ": outlier histogram (samples > p99)", w: halfW, h: halfH,
				draw: func() (*plot.Plot, error) { return outlierHistogram(name, ser.Ns, q99) }},
			&plotSpec{title: name + ": time series", w: wideW, h: wideH, wide: true,
				draw: func() (*plot.Plot, error) { return timeSeries(name, ser.Ns) }},
		)
	}
	s.tables = append(s.tables, table{"series in the samples file", t})
	return s
}

func latencySection(s *section, in *Input) error {
	var rows []latency.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	for i := range rows {
		r := &rows[i]
		// Results of the previous version count in raw_count, not count.
		if r.OneWay.Count == 0 && r.Measured > 0 {
			r.OneWay.Count = r.Measured
			if r.RoundTrip != nil {
				r.RoundTrip.Count = r.Measured
			}
		}
		if r.Error != "" {
			s.notes = append(s.notes, fmt.Sprintf("%s %s %s not measured: %s", r.Mode, r.Transport, bench.FormatSize(r.Size), r.Error))
		}
		for _, n := range r.Notes {
			s.notes = append(s.notes, fmt.Sprintf("%s %s: %s", r.Mode, r.Transport, n))
		}
	}
	var params []latency.Params
	if json.Unmarshal(in.Params, &params) == nil && len(params) > 0 && params[0].Method == "" {
		s.notes = append(s.notes, "measured by the previous method: send-time stamps with coordinated-omission correction on top, which counts a stall twice; rerun `ipcbench latency` for figures measured from the scheduled send time")
	}
	s.tables = append(s.tables, table{"percentiles from the scheduled send time, n observations each (one way, round trip)", latency.Table(rows)})
	var b strings.Builder
	if err := latency.WriteSeedTable(&b, rows); err == nil && b.Len() > 0 {
		s.pres = append(s.pres, pre{"in seed 002's format", strings.TrimRight(b.String(), "\n")})
	}
	sizes := map[int]bool{}
	var order []int
	for _, r := range rows {
		if r.Error == "" && !sizes[r.Size] {
			sizes[r.Size] = true
			order = append(order, r.Size)
		}
	}
	for _, size := range order {
		var oneWay, round []curve
		for _, r := range rows {
			if r.Error != "" || r.Size != size {
				continue
			}
			label := r.Mode + " " + r.Transport
			if c := curveOf(label, &r.OneWay); len(c.pts) > 0 {
				oneWay = append(oneWay, c)
			}
			if r.RoundTrip != nil {
				if c := curveOf(label, r.RoundTrip); len(c.pts) > 0 {
					round = append(round, c)
				}
			}
		}
		sz := bench.FormatSize(size)
		if len(oneWay) > 0 {
			s.plots = append(s.plots, &plotSpec{title: "one-way latency percentiles, " + sz, w: halfW, h: halfH + 0.4*vg.Inch,
				draw: func() (*plot.Plot, error) { return percentileCurves("One way, "+sz, oneWay) }})
		}
		if len(round) > 0 {
			s.plots = append(s.plots, &plotSpec{title: "round-trip latency percentiles, " + sz, w: halfW, h: halfH + 0.4*vg.Inch,
				draw: func() (*plot.Plot, error) { return percentileCurves("Round trip, "+sz, round) }})
		}
	}
	return nil
}

// curveOf keeps the points of d's percentile curve that a "nines" axis can
// show: from the median up to, not including, 100 (which is infinitely
// many nines; the worst case is in the table), and only those its count
// supports (bench.Supported).
func curveOf(label string, d *latency.Dist) curve {
	c := curve{label: label}
	for _, p := range d.Percentiles {
		if p.Percentile >= 50 && p.Percentile < 100 && (d.Count == 0 || bench.Supported(d.Count, p.Percentile)) {
			c.pts = append(c.pts, [2]float64{p.Percentile, float64(p.Ns) / 1e3})
		}
	}
	if len(c.pts) == 0 && d.P50 > 0 {
		// Older results without the curve: use the summary percentiles.
		for _, p := range [][2]float64{{50, d.P50}, {99, d.P99}, {99.9, d.P999}, {99.99, d.P9999}, {99.999, d.P99999}} {
			c.pts = append(c.pts, [2]float64{p[0], p[1] / 1e3})
		}
	}
	return c
}

func bufsweepSection(s *section, in *Input) error {
	var rows []bufsweep.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Error != "" {
			s.notes = append(s.notes, fmt.Sprintf("%s %s buffer %s not measured: %s", r.Transport, r.Fault, bench.FormatSize(r.Buffer), r.Error))
		}
	}
	s.tables = append(s.tables, table{"fixed volume through each write buffer size", bufsweep.Table(rows)})
	var mbps, writes []curve
	idx := map[string]int{}
	for _, r := range rows {
		if r.Error != "" || r.Buffer <= 0 {
			continue
		}
		label := r.Transport
		if r.Fault != "" && r.Fault != "none" {
			label += " " + r.Fault
		}
		i, ok := idx[label]
		if !ok {
			i = len(mbps)
			idx[label] = i
			mbps = append(mbps, curve{label: label})
			writes = append(writes, curve{label: label})
		}
		if r.MBps > 0 {
			mbps[i].pts = append(mbps[i].pts, [2]float64{float64(r.Buffer), r.MBps})
		}
		if r.WriteSyscalls > 0 && r.Volume > 0 {
			// Per MiB moved, because small-buffer rows are capped to a
			// smaller volume and raw counts would not compare.
			writes[i].pts = append(writes[i].pts, [2]float64{float64(r.Buffer), float64(r.WriteSyscalls) * (1 << 20) / float64(r.Volume)})
		}
	}
	if len(mbps) > 0 {
		s.plots = append(s.plots,
			&plotSpec{title: "throughput vs write buffer size (MB/s)", w: halfW, h: halfH + 0.4*vg.Inch,
				draw: func() (*plot.Plot, error) {
					return logLogLines("Throughput vs buffer size", "write buffer (bytes)", "MB/s", mbps, true)
				}},
			&plotSpec{title: "write syscalls per MiB vs write buffer size", w: halfW, h: halfH + 0.4*vg.Inch,
				draw: func() (*plot.Plot, error) {
					return logLogLines("write(2) calls per MiB moved", "write buffer (bytes)", "writes per MiB", writes, false)
				}})
	}
	return nil
}

// throughputRow mirrors cmd/ipcbench's throughput row: the producer-side
// row plus the aggregator-wide figures of its run.
type throughputRow struct {
	throughput.Row
	AggCPUNs      float64 `json:"aggregator_cpu_ns_per_record"`
	AggPeakRSSKiB int64   `json:"aggregator_peak_rss_kib"`
}

func bufLabel(b int) string {
	if b <= 0 {
		return "unbuffered"
	}
	return "buf " + bench.FormatSize(b)
}

func throughputSection(s *section, in *Input) error {
	var rows []throughputRow
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	t := &bench.Table{Header: []string{"transport", "prods", "size", "buffer", "sent", "written", "lost", "dup", "reord", "kdrops",
		"records/s", "x unixsock", "MB/s", "recv/offered", "agg ns/rec", "prod ns/rec", "agg RSS MiB"}}
	plain := make([]throughput.Row, len(rows))
	for i, r := range rows {
		plain[i] = r.Row
	}
	vs := throughput.VsBaseline(plain)
	for i, r := range rows {
		t.Add(r.Transport, r.Producers, bench.FormatSize(r.Size), bench.FormatSize(r.Buffer), r.Sent, r.Written, r.Lost, r.Duplicated,
			r.Reordered, r.KernelDrops, fmt.Sprintf("%.0f", r.RecordsPerS), throughput.FormatVs(vs[i]), fmt.Sprintf("%.1f", r.MBPerS), fmt.Sprintf("%.4f", r.Offered),
			fmt.Sprintf("%.0f", r.AggCPUNs), fmt.Sprintf("%.0f", r.ProdCPUNs), fmt.Sprintf("%.1f", float64(r.AggPeakRSSKiB)/1024))
	}
	s.tables = append(s.tables, table{"producers → aggregator → file", t})
	if len(rows) == 0 {
		return nil
	}
	// Categories are the workloads, groups the producer buffer sizes, so
	// that a sweep over buffers reads as bars side by side per transport.
	var cats []string
	catIdx := map[string]int{}
	var bufs []int
	bufIdx := map[int]int{}
	for _, r := range rows {
		c := fmt.Sprintf("%s ×%d %s", r.Transport, r.Producers, bench.FormatSize(r.Size))
		if _, ok := catIdx[c]; !ok {
			catIdx[c] = len(cats)
			cats = append(cats, c)
		}
		if _, ok := bufIdx[r.Buffer]; !ok {
			bufIdx[r.Buffer] = len(bufs)
			bufs = append(bufs, r.Buffer)
		}
	}
	rate := make([]barGroup, len(bufs))
	cpu := make([]barGroup, len(bufs))
	for i, b := range bufs {
		rate[i] = barGroup{bufLabel(b), make([]float64, len(cats))}
		cpu[i] = barGroup{bufLabel(b), make([]float64, len(cats))}
	}
	for _, r := range rows {
		c, b := catIdx[fmt.Sprintf("%s ×%d %s", r.Transport, r.Producers, bench.FormatSize(r.Size))], bufIdx[r.Buffer]
		rate[b].vals[c] = r.RecordsPerS / 1e3
		cpu[b].vals[c] = r.AggCPUNs
	}
	s.plots = append(s.plots,
		&plotSpec{title: "records/s by transport and producer buffer size (thousands)", w: halfW, h: halfH + 0.6*vg.Inch,
			draw: func() (*plot.Plot, error) {
				return groupedBars("Records/s (thousands)", "k records/s", cats, rate, halfW)
			}},
		&plotSpec{title: "aggregator CPU per record by transport and producer buffer size (ns)", w: halfW, h: halfH + 0.6*vg.Inch,
			draw: func() (*plot.Plot, error) {
				return groupedBars("Aggregator CPU per record", "ns/record", cats, cpu, halfW)
			}})
	return nil
}

// connsSection renders `ipcbench conns`: the same table as the terminal
// (rows as measured, compared with their 0-idle rows when saved), and
// records/s and RSS per idle connection against the idle count.
func connsSection(s *section, in *Input) error {
	var rows []conns.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	s.tables = append(s.tables, table{"idle connections held while producers run flat out", conns.Table(rows)})
	var cats, perConnCats []string
	catIdx, perConnIdx := map[string]int{}, map[string]int{}
	var transports []string
	tIdx := map[string]int{}
	label := func(r conns.Row) string {
		if r.Held != int64(r.Idle) {
			return fmt.Sprintf("%d (%d held)", r.Idle, r.Held)
		}
		return fmt.Sprint(r.Idle)
	}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		if _, ok := tIdx[r.Transport]; !ok {
			tIdx[r.Transport] = len(transports)
			transports = append(transports, r.Transport)
		}
		if c := label(r); catIdx[c] == 0 {
			cats = append(cats, c)
			catIdx[c] = len(cats) // 1-based: 0 is absent
			if r.Idle > 0 {
				perConnCats = append(perConnCats, c)
				perConnIdx[c] = len(perConnCats)
			}
		}
	}
	if len(cats) == 0 {
		return nil
	}
	rate := make([]barGroup, len(transports))
	perConn := make([]barGroup, 2*len(transports))
	for i, t := range transports {
		rate[i] = barGroup{t, make([]float64, len(cats))}
		perConn[2*i] = barGroup{t + " while producers ran", make([]float64, len(perConnCats))}
		perConn[2*i+1] = barGroup{t + " before", make([]float64, len(perConnCats))}
	}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		ti := tIdx[r.Transport]
		rate[ti].vals[catIdx[label(r)]-1] = r.RecordsPerS / 1e3
		if j := perConnIdx[label(r)]; j > 0 {
			perConn[2*ti].vals[j-1] = r.RSSPerConn
			perConn[2*ti+1].vals[j-1] = r.IdleRSSPerConn
		}
	}
	s.plots = append(s.plots, &plotSpec{title: "records/s by idle connections held (thousands)", w: halfW, h: halfH + 0.4*vg.Inch,
		draw: func() (*plot.Plot, error) {
			p, err := groupedBars("Records/s with idle connections held", "k records/s", cats, rate, halfW)
			if err == nil {
				legendRoom(p, rate, 0)
			}
			return p, err
		}})
	if len(perConnCats) > 0 {
		s.plots = append(s.plots, &plotSpec{title: "aggregator RSS per idle connection over the 0-idle row (bytes; the line is the 2048 B target)", w: halfW, h: halfH + 0.4*vg.Inch,
			draw: func() (*plot.Plot, error) {
				p, err := groupedBars("RSS per idle connection", "bytes", perConnCats, perConn, halfW)
				if err != nil {
					return nil, err
				}
				legendRoom(p, perConn, conns.RSSPerConnBound)
				target, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: conns.RSSPerConnBound}, {X: p.X.Max, Y: conns.RSSPerConnBound}})
				if err != nil {
					return nil, err
				}
				target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
				p.Add(target)
				return p, nil
			}})
	}
	return nil
}

// legendRoom raises a bar chart's y axis above its tallest bar (and
// above floor) so that the legend in the top corner covers no bar.
func legendRoom(p *plot.Plot, groups []barGroup, floor float64) {
	top := floor
	for _, g := range groups {
		for _, v := range g.vals {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = max(top, v)
			}
		}
	}
	if top > 0 {
		p.Y.Max = niceCeil(top * (1 + 0.12*float64(len(groups)+1)))
	}
}

// niceCeil rounds v up to a round multiple of a power of ten, so that the
// default ticker's ticks are round numbers.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func peersSection(s *section, in *Input) error {
	var cells []peers.Cell
	if err := decodeRows(in.Rows, &cells); err != nil {
		return err
	}
	t := &bench.Table{Header: []string{"transport", "prods", "size", "daemon", "sent", "written", "lost", "records/s", "MB/s", "logagg/daemon"}}
	var cats []string
	var daemons []string
	dIdx := map[string]int{}
	for _, c := range cells {
		cats = append(cats, fmt.Sprintf("%s ×%d %s", c.Transport, c.Producers, bench.FormatSize(c.Size)))
		var ours float64
		for _, r := range c.Rows {
			if r.Daemon == "logagg" {
				ours = r.RecordsPerS
			}
			if _, ok := dIdx[r.Daemon]; !ok {
				dIdx[r.Daemon] = len(daemons)
				daemons = append(daemons, r.Daemon)
			}
		}
		for _, r := range c.Rows {
			ratio := "-"
			// The null reader is a reference, not a daemon to beat.
			if r.Daemon != "logagg" && r.Daemon != (peers.NullReader{}).Name() && r.RecordsPerS > 0 && ours > 0 {
				ratio = fmt.Sprintf("%.2fx", ours/r.RecordsPerS)
			}
			t.Add(c.Transport, c.Producers, bench.FormatSize(c.Size), r.Daemon, r.Sent, r.Written, r.Lost,
				fmt.Sprintf("%.0f", r.RecordsPerS), fmt.Sprintf("%.1f", r.MBPerS), ratio)
		}
		for _, d := range sortedKeys(c.Configs) {
			s.details = append(s.details, pre{fmt.Sprintf("%s config for %s ×%d %s", d, c.Transport, c.Producers, bench.FormatSize(c.Size)), c.Configs[d]})
		}
	}
	s.tables = append(s.tables, table{"the same producer against each daemon", t})
	if len(cells) == 0 {
		return nil
	}
	groups := make([]barGroup, len(daemons))
	for i, d := range daemons {
		groups[i] = barGroup{d, make([]float64, len(cats))}
	}
	for ci, c := range cells {
		for _, r := range c.Rows {
			groups[dIdx[r.Daemon]].vals[ci] = r.RecordsPerS / 1e3
		}
	}
	s.plots = append(s.plots, &plotSpec{title: "records/s per daemon (thousands)", w: wideW, h: wideH, wide: true,
		draw: func() (*plot.Plot, error) {
			return groupedBars("Records/s per daemon", "k records/s written", cats, groups, wideW)
		}})
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// overheadSection renders `ipcbench trace --overhead`: the same summary
// and difference tables as the terminal, seed 002's table for each state's
// median run, and the states' one-way percentile curves overlaid.
func overheadSection(s *section, in *Input) error {
	var rows []tracebench.OverheadRow
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	s.tables = append(s.tables,
		table{"tracer states over runs: median run (fastest–slowest run)", tracebench.OverheadTable(rows)},
		table{"difference from no tracer (median run minus median run)", tracebench.OverheadDiffTable(rows)})
	var b strings.Builder
	if err := tracebench.WriteOverhead(&b, rows); err == nil && b.Len() > 0 {
		s.pres = append(s.pres, pre{"median runs in seed 002's format, and the summary", strings.TrimRight(b.String(), "\n")})
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
		s.plots = append(s.plots, &plotSpec{title: "one-way latency percentiles per tracer state (median run of each)", w: wideW, h: wideH + 0.6*vg.Inch, wide: true,
			draw: func() (*plot.Plot, error) { return percentileCurves("One way, per tracer state", curves) }})
	}
	return nil
}
