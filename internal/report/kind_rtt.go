package report

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/rtt"
	"gonum.org/v1/plot"
)

// rttSection renders rtt.Tables, the terminal's tables, and one bar chart
// of median and p99 per placement.
func rttSection(s *section, in *Input) error {
	var rows []rtt.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return err
	}
	for _, tt := range rtt.Tables(rows) {
		s.tables = append(s.tables, table{tt.Title, tt.Table})
	}
	byPlacement := map[string][]rtt.Row{}
	var placements []string
	for _, r := range rows {
		if r.Error != "" {
			s.notes = append(s.notes, fmt.Sprintf("%s %s %s not measured: %s", r.Mechanism, bench.FormatSize(r.Size), r.Placement, r.Error))
			continue
		}
		if _, seen := byPlacement[r.Placement]; !seen {
			placements = append(placements, r.Placement)
		}
		byPlacement[r.Placement] = append(byPlacement[r.Placement], r)
	}
	for _, pl := range placements {
		ok := byPlacement[pl]
		cats := make([]string, len(ok))
		med := make([]float64, len(ok))
		p99 := make([]float64, len(ok))
		for i, r := range ok {
			cats[i] = r.Mechanism + " " + bench.FormatSize(r.Size)
			med[i], p99[i] = r.Stats.Median/1e3, r.Stats.Q99/1e3
		}
		name := pl
		if name == "" {
			name = "placement not recorded"
		}
		title := "round trip per mechanism, " + name + ": median and p99 (µs)"
		s.plots = append(s.plots, &plotSpec{title: title, w: wideW, h: wideH, wide: true,
			reading: placementReading[pl] + " Each mechanism has two bars, the median round trip and the 99th percentile, " +
				"in µs; lower is better, and a p99 bar far above its median bar means a long tail (scheduler " +
				"preemption, or RT throttling for a row marked \"RT?\" in the table).",
			draw: func() (*plot.Plot, error) {
				return groupedBars("Round trip per mechanism, "+name, "µs", cats,
					[]barGroup{{"median", med}, {"p99", p99}}, wideW)
			}})
	}
	return nil
}

// placementReading says where the sides of a plot's rows ran.
var placementReading = map[string]string{
	rtt.PlaceSame:     "Both sides pinned to one CPU: every hand-off is a switch between them on that CPU (one-thread rows never switch).",
	rtt.PlaceCross:    "The two sides pinned to two different CPUs: each hand-off crosses between cores, and a side that sleeps pays a wake-up on another CPU.",
	rtt.PlaceUnpinned: "Unpinned: the scheduler chose the CPUs, so these rows mix same-core and cross-core hand-offs (the table's \"ran on\" says where they started).",
	"":                "A result written before rows recorded their placement.",
}

func samplesSection(i int, sm *Samples) *section {
	s := &section{id: fmt.Sprintf("s%d-%s", i, samplesKind), title: "rtt samples: " + sm.Name, rank: rankOf(samplesKind)}
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
				reading: "How many round trips took how long, up to p99: the body of the distribution. " +
					"One narrow peak is a steady hand-off; a second peak or a long shoulder is a second path " +
					"(a wake-up on another CPU, a migration). The bins are log-spaced when the body spans more than 3×.",
				draw: func() (*plot.Plot, error) { return mainHistogram(name, ser.Ns, q99) }},
			&plotSpec{title: name + ": outlier histogram (samples > p99)", w: halfW, h: halfH,
				reading: "The round trips slower than p99, with log-spaced bins and a log count: a single stall of " +
					"milliseconds shows beside the hundreds just above p99. Bars far to the right are the process " +
					"waiting for a CPU; a cluster near a fixed delay (a timer tick, an RT throttling pause) points at its cause.",
				draw: func() (*plot.Plot, error) { return outlierHistogram(name, ser.Ns, q99) }},
			&plotSpec{title: name + ": time series", w: wideW, h: wideH, wide: true,
				reading: fmt.Sprintf("Every round trip in the order it was taken, on a log scale. Beyond %d samples "+
					"they are grouped into %d buckets of consecutive samples: the dots are each bucket's maximum "+
					"(no spike is lost), the line its median and the band its minimum to maximum. Spikes at regular "+
					"intervals point to a periodic disturbance; a step in the median to a migration or a clock change.",
					maxBuckets, maxBuckets),
				draw: func() (*plot.Plot, error) { return timeSeries(name, ser.Ns) }},
		)
	}
	s.tables = append(s.tables, table{"series in the samples file", t})
	return s
}
