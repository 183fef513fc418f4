package tracebench

import (
	"fmt"
	"io"
	"slices"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/latency"
)

// Spread is one figure over the runs of a state: the median run's value
// and the smallest and largest.
type Spread struct {
	Median, Min, Max float64
	N                int
}

func spreadOf(v []float64) Spread {
	if len(v) == 0 {
		return Spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	// The lower median for an even count: a value that was measured.
	return Spread{Median: s[(len(s)-1)/2], Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// OverheadState is the summary of one tracer state over its runs.
type OverheadState struct {
	State     string
	Rows      []*OverheadRow // the runs without an error, in run order
	Count     int64          // the smallest observation count of a run
	figures   map[string]Spread
	MedianRun *OverheadRow // the run with the median one-way mean
}

// figure names of OverheadState.Figure.
var overheadFigures = []struct {
	name string
	pct  float64 // percentile, for bench.Supported; 0 for others
	f    func(r *OverheadRow) float64
}{
	{"1w mean", 0, func(r *OverheadRow) float64 { return r.Latency.OneWay.Mean }},
	{"1w p50", 50, func(r *OverheadRow) float64 { return r.Latency.OneWay.P50 }},
	{"1w p99", 99, func(r *OverheadRow) float64 { return r.Latency.OneWay.P99 }},
	{"1w p99.9", 99.9, func(r *OverheadRow) float64 { return r.Latency.OneWay.P999 }},
	{"1w max", 0, func(r *OverheadRow) float64 { return r.Latency.OneWay.Max }},
	{"rt mean", 0, func(r *OverheadRow) float64 {
		if r.Latency.RoundTrip == nil {
			return 0
		}
		return r.Latency.RoundTrip.Mean
	}},
	{"late sends", 0, func(r *OverheadRow) float64 { return float64(r.Latency.LateSends) }},
	{"send late p50", 50, func(r *OverheadRow) float64 { return sendLag(r, 50) }},
	{"send late p99", 99, func(r *OverheadRow) float64 { return sendLag(r, 99) }},
	{"tracer CPU", 0, func(r *OverheadRow) float64 { return r.TracerCPU }},
	{"events/s", 0, func(r *OverheadRow) float64 { return r.EventsPerS }},
	{"workload CPU/msg", 0, func(r *OverheadRow) float64 { return r.WorkloadCPUNs }},
}

// sendLag is the sender's lateness at percentile p (50 or 99) in r's
// latency run; 0 in results written before it was measured.
func sendLag(r *OverheadRow, p float64) float64 {
	d := r.Latency.SendLag
	if d == nil {
		return 0
	}
	if p == 99 {
		return d.P99
	}
	return d.P50
}

// Figure is the spread over runs of the named figure ("1w mean", "1w p99",
// "tracer CPU", ...; see the summary table's columns).
func (s *OverheadState) Figure(name string) Spread { return s.figures[name] }

// SummarizeOverhead groups rows by state, in first-seen order.
func SummarizeOverhead(rows []OverheadRow) []*OverheadState {
	var out []*OverheadState
	idx := map[string]*OverheadState{}
	for i := range rows {
		r := &rows[i]
		st, ok := idx[r.State()]
		if !ok {
			st = &OverheadState{State: r.State(), figures: map[string]Spread{}}
			idx[r.State()] = st
			out = append(out, st)
		}
		if r.Latency.Error != "" {
			continue
		}
		st.Rows = append(st.Rows, r)
		if n := r.Latency.OneWay.Count; st.Count == 0 || n < st.Count {
			st.Count = n
		}
	}
	for _, st := range out {
		for _, f := range overheadFigures {
			v := make([]float64, len(st.Rows))
			for i, r := range st.Rows {
				v[i] = f.f(r)
			}
			st.figures[f.name] = spreadOf(v)
		}
		if len(st.Rows) > 0 {
			runs := slices.Clone(st.Rows)
			slices.SortStableFunc(runs, func(a, b *OverheadRow) int {
				return cmpFloat(a.Latency.OneWay.Mean, b.Latency.OneWay.Mean)
			})
			st.MedianRun = runs[(len(runs)-1)/2]
		}
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func formatSpread(s Spread, format func(float64) string) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 || s.Min == s.Max {
		return format(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", format(s.Median), format(s.Min), format(s.Max))
}

func formatFigure(name string, v float64) string {
	switch name {
	case "late sends":
		return fmt.Sprintf("%.0f", v)
	case "tracer CPU":
		return fmt.Sprintf("%.0f%%", v*100)
	case "events/s":
		if v >= 1000 {
			return fmt.Sprintf("%.1fk", v/1e3)
		}
		return fmt.Sprintf("%.0f", v)
	}
	return bench.FormatNs(v)
}

// OverheadTable is the summary of the study, one line per tracer state:
// the median run's figure and, in brackets, the smallest and largest of
// the runs. A percentile the per-run count cannot support is
// bench.Unsupported.
func OverheadTable(rows []OverheadRow) *bench.Table {
	t := &bench.Table{Header: []string{"tracer", "runs", "n/run"}}
	for _, f := range overheadFigures {
		t.Header = append(t.Header, f.name)
	}
	for _, st := range SummarizeOverhead(rows) {
		cells := []any{st.State, len(st.Rows), st.Count}
		for _, f := range overheadFigures {
			if f.pct > 0 && !bench.Supported(st.Count, f.pct) {
				cells = append(cells, bench.Unsupported)
				continue
			}
			name := f.name
			cells = append(cells, formatSpread(st.figures[name], func(v float64) string { return formatFigure(name, v) }))
		}
		t.Add(cells...)
	}
	return t
}

// diffFigures are the columns of OverheadDiffTable.
var diffFigures = []string{"1w mean", "1w p50", "1w p99", "1w p99.9", "rt mean", "workload CPU/msg"}

// OverheadDiffTable is each state's difference from the state without a
// tracer: median minus median, the ratio of the one-way means, and whether
// the state's runs all lie outside the no-tracer runs' range ("beyond
// noise": every run slower than the slowest run without a tracer, by
// mean). Without a "none" state it has no rows.
func OverheadDiffTable(rows []OverheadRow) *bench.Table {
	t := &bench.Table{Header: []string{"tracer vs none"}}
	for _, f := range diffFigures {
		t.Header = append(t.Header, "Δ "+f)
	}
	t.Header = append(t.Header, "× 1w mean", "beyond noise")
	states := SummarizeOverhead(rows)
	var base *OverheadState
	for _, st := range states {
		if st.State == TracerNone && len(st.Rows) > 0 {
			base = st
		}
	}
	if base == nil {
		return t
	}
	for _, st := range states {
		if st == base || len(st.Rows) == 0 {
			continue
		}
		cells := []any{st.State}
		for _, name := range diffFigures {
			if name == "1w p99.9" && !(bench.Supported(st.Count, 99.9) && bench.Supported(base.Count, 99.9)) {
				cells = append(cells, bench.Unsupported)
				continue
			}
			d := st.figures[name].Median - base.figures[name].Median
			sign := "+"
			if d < 0 {
				sign, d = "-", -d
			}
			cells = append(cells, sign+bench.FormatNs(d))
		}
		ratio := "-"
		if m := base.figures["1w mean"].Median; m > 0 {
			ratio = fmt.Sprintf("%.2fx", st.figures["1w mean"].Median/m)
		}
		beyond := "no"
		if st.figures["1w mean"].Min > base.figures["1w mean"].Max {
			beyond = "yes"
		} else if st.figures["1w mean"].Max < base.figures["1w mean"].Min {
			beyond = "yes (faster)"
		}
		cells = append(cells, ratio, beyond)
		t.Add(cells...)
	}
	return t
}

// Overhead table titles.
const (
	TitleOverheadSummary = "tracer states over runs: median run (fastest–slowest run)"
	TitleOverheadDiff    = "difference from no tracer (median run minus median run)"
)

// OverheadTables is every table of the overhead study (ADR 0037): the
// summary over runs and the difference from no tracer.
func OverheadTables(rows []OverheadRow) []bench.TitledTable {
	summary := TitleOverheadSummary
	if len(rows) > 0 {
		l := rows[0].Latency
		summary = fmt.Sprintf("%s: %s, %s at %d/s", summary, l.Transport, bench.FormatSize(l.Size), l.Rate)
	}
	return []bench.TitledTable{
		{Title: summary, Table: OverheadTable(rows)},
		{Title: TitleOverheadDiff, Table: OverheadDiffTable(rows)},
	}
}

// WriteMedianRuns prints seed 002's table for the median run of each
// state (by one-way mean).
func WriteMedianRuns(w io.Writer, rows []OverheadRow) error {
	var lrows []latency.Row
	for _, st := range SummarizeOverhead(rows) {
		if st.MedianRun != nil {
			r := st.MedianRun.Latency
			r.Mode = fmt.Sprintf("tracer=%s (median of %d runs: run %d)", st.State, len(st.Rows), st.MedianRun.Run)
			lrows = append(lrows, r)
		}
	}
	return latency.WriteSeedTable(w, lrows)
}

// overheadNotes say how the study was run, for its result.
func overheadNotes(rows []OverheadRow) []string {
	notes := []string{
		"idle tracer: tracepoints syscalls:sys_exit_read/write on every process, filter never true (seed 002's B)",
		"logging tracer: the same probes, one printf line per read/write of the echo process; bpftrace writes them to a file itself (-o), so no line passes through the measured process (seed 002's C)",
		"workload (ipcbench's sender and receiver threads, and the echo child's) pinned to CPU 0 in every run; placement shared = bpftrace on CPU 0 with it, other = bpftrace on CPU 1; the probes run inside the traced syscalls, on CPU 0, in both",
		"states interleaved: each run measures every state, in reverse order on even runs; figures are the median run (fastest–slowest run)",
		"tracer CPU = bpftrace's user+system time over the run's wall time (1 CPU = 100%); workload CPU/msg = this process's and the echo child's CPU time per message sent (getrusage), which holds the probes' cost, less the sender's spinning for its due times (an estimate, see latency's pacer)",
		"the sender spins to each due time, yielding CPU 0 at every turn (latency's spin pacing); send late = its actual send minus the scheduled time, the part of every latency that is the instrument's",
	}
	for _, st := range SummarizeOverhead(rows) {
		if st.Count > 0 && !bench.Supported(st.Count, 99.9) {
			notes = append(notes, bench.SupportNote(st.Count, 50, 99, 99.9))
			break
		}
	}
	return notes
}
