package report

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/latency"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

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
			s.notes = append(s.notes, fmt.Sprintf("%s %s %s %s not measured: %s", r.Mode, r.Transport, bench.FormatSize(r.Size), r.Placement, r.Error))
		}
		for _, n := range r.Notes {
			s.notes = append(s.notes, fmt.Sprintf("%s %s: %s", r.Mode, r.Transport, n))
		}
	}
	if latencyMethod(in.Params) == "" {
		s.notes = append(s.notes, "measured by the previous method: send-time stamps with coordinated-omission correction on top, which counts a stall twice; rerun `ipcbench latency` for figures measured from the scheduled send time")
	}
	addTables(s, latency.Tables(rows))
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
			if r.Mode == latency.ModeRaw && r.Placement != "" {
				label += " " + r.Placement
			}
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
				reading: "Latency (receive time minus the message's scheduled send time) against percentile on a \"nines\" axis: 90, 99, 99.9, ... equally spaced, so the tail gets as much room as the median. One curve per mode, transport and placement (raw rows); lower is better, and a curve that rises steeply to the right has a heavy tail. Curves stop at the last percentile their observation count supports. The sender's own lateness at the same percentiles is in the table: where it is close to a curve, the instrument made that curve.",
				draw:    func() (*plot.Plot, error) { return percentileCurves("One way, "+sz, oneWay) }})
		}
		if len(round) > 0 {
			s.plots = append(s.plots, &plotSpec{title: "round-trip latency percentiles, " + sz, w: halfW, h: halfH + 0.4*vg.Inch,
				reading: "As the one-way plot, for rows with an echo: scheduled send to the echo's arrival back at the sender, on the same nines axis and log latency axis. The gap between a transport's round-trip and one-way curves is the return leg plus the echo's own wake-up.",
				draw:    func() (*plot.Plot, error) { return percentileCurves("Round trip, "+sz, round) }})
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

// latencyMethod is the method saved in a latency result's params: one
// object, or (results saved before sizes moved into latency.Options) a
// list of one per size. "" means the previous method.
func latencyMethod(raw json.RawMessage) string {
	var one latency.Params
	if json.Unmarshal(raw, &one) == nil {
		return one.Method
	}
	var perSize []latency.Params
	if json.Unmarshal(raw, &perSize) == nil && len(perSize) > 0 {
		return perSize[0].Method
	}
	return ""
}
