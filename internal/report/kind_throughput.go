package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/forwardbench"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

func bufLabel(b int) string {
	if b <= 0 {
		return "unbuffered"
	}
	return "buf " + bench.FormatSize(b)
}

func throughputSection(s *section, in *Input) error {
	var rows []throughput.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	addTables(s, throughput.Tables(rows))
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
		cpu[b].vals[c] = r.DaemonCPUNs
	}
	s.plots = append(s.plots,
		&plotSpec{title: "records/s by transport and producer buffer size (thousands)", w: halfW, h: halfH + 0.6*vg.Inch,
			reading: "One group of bars per workload (transport × producers × record size), one bar per producer write buffer size; taller is faster. Bars of one group compare buffer sizes on the same transport; the same bar across groups compares transports. Records/s counts what the aggregator wrote, not what the producers sent, so a lossy transport is not flattered.",
			draw: func() (*plot.Plot, error) {
				return groupedBars("Records/s (thousands)", "k records/s", cats, rate, halfW)
			}},
		&plotSpec{title: "aggregator CPU per record by transport and producer buffer size (ns)", w: halfW, h: halfH + 0.6*vg.Inch,
			reading: "The aggregator's user+system CPU time over the run divided by the records it wrote, grouped as in the records/s plot; shorter is cheaper. A transport fast in records/s but tall here buys its speed with the aggregator's CPU; producer-side CPU is in the table's prod ns/rec column.",
			draw: func() (*plot.Plot, error) {
				return groupedBars("Aggregator CPU per record", "ns/record", cats, cpu, halfW)
			}})
	return nil
}

// forwardSection renders the forward kind (`ipcbench throughput --forward
// kafka`, package forwardbench): the same tables as the terminal. Its rows
// carry lag samples, not a grid, so it has no plots.
func forwardSection(s *section, in *Input) error {
	var rows []forwardbench.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	addTables(s, forwardbench.Tables(rows))
	return nil
}
