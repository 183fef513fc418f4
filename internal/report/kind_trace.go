package report

import (
	"strings"

	"github.com/ipclab/logagg/internal/bench/tracebench"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

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
