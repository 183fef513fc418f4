package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench/conns"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// connsSection renders `ipcbench conns`: the same table as the terminal
// (rows as measured, compared with their 0-idle rows when saved), and
// records/s and RSS per idle connection against the idle count.
func connsSection(s *section, in *Input) error {
	var rows []conns.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	addTables(s, conns.Tables(rows))
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
		reading: "One group per idle-connection count (with the count actually held where fewer), one bar per transport: the flat-out producer's records/s while the aggregator holds that many idle connections. Bars as tall as the 0-idle group mean idle connections cost the busy one nothing; the target is at least 90% of it.",
		draw: func() (*plot.Plot, error) {
			p, err := groupedBars("Records/s with idle connections held", "k records/s", cats, rate, halfW)
			if err == nil {
				legendRoom(p, rate, 0)
			}
			return p, err
		}})
	if len(perConnCats) > 0 {
		s.plots = append(s.plots, &plotSpec{title: "aggregator RSS per idle connection over the 0-idle row (bytes; the line is the 2048 B target)", w: halfW, h: halfH + 0.4*vg.Inch,
			reading: "The aggregator's resident memory above the 0-idle row's, divided by the idle connections held: \"before\" once they were open, \"while producers ran\" at the peak with the producers sending. Bars under the dashed line meet the 2048 bytes per connection target; a bar that grows with the count means memory per connection is not constant.",
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
