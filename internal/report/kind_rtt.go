package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/rtt"
	"gonum.org/v1/plot"
)

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
