package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

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
