package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/peers"
	"gonum.org/v1/plot"
)

func peersSection(s *section, in *Input) error {
	var cells []peers.Row
	if err := decodeRows(in.Rows, &cells); err != nil {
		return err
	}
	addTables(s, peers.Tables(cells))
	var cats []string
	var daemons []string
	dIdx := map[string]int{}
	for _, c := range cells {
		cats = append(cats, fmt.Sprintf("%s ×%d %s", c.Transport, c.Producers, bench.FormatSize(c.Size)))
		for _, r := range c.Daemons {
			if _, ok := dIdx[r.Daemon]; !ok {
				dIdx[r.Daemon] = len(daemons)
				daemons = append(daemons, r.Daemon)
			}
		}
		for _, d := range sortedKeys(c.Configs) {
			s.details = append(s.details, pre{fmt.Sprintf("%s config for %s ×%d %s", d, c.Transport, c.Producers, bench.FormatSize(c.Size)), c.Configs[d]})
		}
	}
	if len(cells) == 0 {
		return nil
	}
	groups := make([]barGroup, len(daemons))
	for i, d := range daemons {
		groups[i] = barGroup{d, make([]float64, len(cats))}
	}
	for ci, c := range cells {
		for _, r := range c.Daemons {
			groups[dIdx[r.Daemon]].vals[ci] = r.RecordsPerS / 1e3
		}
	}
	s.plots = append(s.plots, &plotSpec{title: "records/s per daemon (thousands)", w: wideW, h: wideH, wide: true,
		reading: "One group per workload (transport × producers × record size), one bar per daemon, all fed by the same producer binary with RFC 3164 lines; taller is faster. The null-reader bar is the ceiling: what the producers reach when the reader discards everything, so a daemon's bar against it shows how much of the producers' pace its own work costs.",
		draw: func() (*plot.Plot, error) {
			return groupedBars("Records/s per daemon", "k records/s written", cats, groups, wideW)
		}})
	return nil
}
