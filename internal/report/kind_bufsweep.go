package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/bufsweep"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

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
