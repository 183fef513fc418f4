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
			s.notes = append(s.notes, fmt.Sprintf("%s %s buffer %s: %s", r.Transport, r.Fault, bench.FormatSize(r.Buffer), r.Error))
		}
	}
	for _, t := range bufsweep.Tables(rows) {
		s.tables = append(s.tables, table{t.Title, t.Table})
	}
	var mbps, writes, dropped []curve
	idx := map[string]int{}
	lossIdx := map[string]int{}
	for _, r := range rows {
		if r.Runs == 0 || r.Buffer <= 0 {
			continue
		}
		label := r.Transport
		if r.Engine != bufsweep.EngineNone {
			label += " " + r.Fault + " (" + string(r.Engine) + ")"
		}
		i, ok := idx[label]
		if !ok {
			i = len(mbps)
			idx[label] = i
			mbps = append(mbps, curve{label: label})
			writes = append(writes, curve{label: label})
		}
		mbps[i].pts = append(mbps[i].pts, [2]float64{float64(r.Buffer), r.MBps})
		writes[i].pts = append(writes[i].pts, [2]float64{float64(r.Buffer), float64(r.WriteSyscalls)})
		if r.Engine == bufsweep.EngineNftNetns && r.TCPPackets > 0 {
			j, ok := lossIdx[r.Fault]
			if !ok {
				j = len(dropped)
				lossIdx[r.Fault] = j
				dropped = append(dropped, curve{label: r.Fault})
			}
			dropped[j].pts = append(dropped[j].pts, [2]float64{float64(r.Buffer), 100 * float64(r.Dropped) / float64(r.TCPPackets)})
		}
	}
	if len(mbps) == 0 {
		return nil
	}
	s.plots = append(s.plots,
		&plotSpec{title: "throughput vs write buffer size (MB/s, median of runs)", w: halfW, h: halfH + 0.4*vg.Inch,
			reading: "Every point moved the same volume. Both axes are logarithmic: a slope of 1 means MB/s grows in step with the buffer " +
				"(the cost is per write(2)); a flat line means the buffer no longer matters. The legend names the fault and the engine " +
				"that applied it: nftables-netns drops single packets in the kernel, toxiproxy-per-chunk delays what toxiproxy reads " +
				"in one go, so its delay does not grow with the number of writes. The spread over runs is in the table above.",
			draw: func() (*plot.Plot, error) {
				return logLogLines("Throughput vs buffer size", "write buffer (bytes)", "MB/s", mbps, true)
			}},
		&plotSpec{title: "write syscalls vs write buffer size", w: halfW, h: halfH + 0.4*vg.Inch,
			reading: "write(2) calls the writer made to move the row's volume (log–log). They should fall on a line of slope −1, " +
				"⌈volume/buffer⌉, for every transport and fault alike; a point above the line means writes returned short.",
			draw: func() (*plot.Plot, error) {
				return logLogLines("write(2) calls per row", "write buffer (bytes)", "write calls", writes, false)
			}})
	if len(dropped) > 0 {
		s.plots = append(s.plots, &plotSpec{title: "packets the nftables rule dropped (% of tcp packets lo delivered)", w: halfW, h: halfH + 0.4*vg.Inch,
			reading: "The kernel's own count of what the loss rule dropped, over the TCP packets lo delivered in that row (data and ACKs), " +
				"log y. Each curve should lie flat near its profile's percentage (0.1, 1, 5) at every buffer size; rows with few " +
				"packets (large buffers move 64 KiB per packet on lo) scatter more, and a row with no drop at all has no point.",
			draw: func() (*plot.Plot, error) {
				return logLogLines("Measured packet loss", "write buffer (bytes)", "% dropped", dropped, false)
			}})
	}
	return nil
}
