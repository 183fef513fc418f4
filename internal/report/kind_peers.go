package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/peers"
	"gonum.org/v1/plot"
)

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
