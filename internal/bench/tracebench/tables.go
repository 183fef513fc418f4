package tracebench

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/trace"
)

// SyscallShare is one syscall's count in a SyscallRow.
type SyscallShare struct {
	Name      string
	Category  trace.Category
	Count     int64
	PerRecord float64
}

// SyscallRow is seed 000's comparison, normalized: syscalls per record on
// one side (producer or aggregator) of one transport, split by where they
// come from (trace.CategoryOf). Runtime + Transp + Other = Total (Transp
// is the transport category; Transport names the transport).
type SyscallRow struct {
	Transport string
	Size      int
	Side      Target
	Records   int64 // sent by the producers
	Syscalls  int64
	Total     float64
	Runtime   float64
	Transp    float64
	Other     float64
	// Top lists the most frequent syscalls, most frequent first.
	Top []SyscallShare
}

// ErrNoSyscalls is returned by PerRecord for a row without syscall counts
// or without records to divide by.
var ErrNoSyscalls = errors.New("no syscall counts")

// PerRecord turns a producer_syscalls row into syscalls per record sent,
// keeping the top n syscalls (n <= 0: all).
func PerRecord(r Row, n int) (SyscallRow, error) {
	if len(r.Syscalls) == 0 || r.Records <= 0 {
		return SyscallRow{}, fmt.Errorf("%w: %s %s on %s (records %d)", ErrNoSyscalls, r.Script, r.Side, r.Transport, r.Records)
	}
	out := SyscallRow{Transport: r.Transport, Size: r.Size, Side: r.Side, Records: r.Records}
	den := float64(r.Records)
	var byCat [3]int64
	for _, kc := range r.Syscalls { // most frequent first already
		cat := trace.CategoryOf(kc.Key)
		out.Syscalls += kc.Count
		switch cat {
		case trace.Runtime:
			byCat[0] += kc.Count
		case trace.Transport:
			byCat[1] += kc.Count
		default:
			byCat[2] += kc.Count
		}
		if n <= 0 || len(out.Top) < n {
			out.Top = append(out.Top, SyscallShare{Name: kc.Key, Category: cat, Count: kc.Count, PerRecord: float64(kc.Count) / den})
		}
	}
	out.Total = float64(out.Syscalls) / den
	out.Runtime, out.Transp, out.Other = float64(byCat[0])/den, float64(byCat[1])/den, float64(byCat[2])/den
	return out, nil
}

// compareTop is how many syscalls the category table names per row; the
// matrices list them all.
const compareTop = 5

// compareTable is seed 000's table: one line per transport and side, the
// category split, and the top syscalls with their category initial (R
// runtime, T transport, O other).
func compareTable(rows []SyscallRow) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "size", "side", "records", "syscalls", "per record", "runtime", "transport", "other", "top syscalls per record"}}
	for _, r := range rows {
		var top []string
		for _, s := range r.Top {
			top = append(top, fmt.Sprintf("%s %.2f%s", s.Name, s.PerRecord, catMark(s.Category)))
		}
		t.Add(r.Transport, r.Size, string(r.Side), r.Records, r.Syscalls, fmt.Sprintf("%.2f", r.Total),
			fmt.Sprintf("%.2f", r.Runtime), fmt.Sprintf("%.2f", r.Transp), fmt.Sprintf("%.2f", r.Other), strings.Join(top, ", "))
	}
	return t
}

func catMark(c trace.Category) string {
	switch c {
	case trace.Runtime:
		return "R"
	case trace.Transport:
		return "T"
	}
	return "O"
}

// Table titles, also used by the report to find the tables it plots.
const (
	TitleRuns     = "runs: what was traced"
	TitleCompare  = "syscalls per record: Go runtime (R), transport (T), other (O)"
	TitleHists    = "histograms: samples and the buckets holding the median, p99 and maximum"
	TitleStats    = "stats() aggregates"
	matrixTitleOf = "%s per record, %s side (%s × transport)"
)

// MatrixTitle is the title of the per-record matrix of one count map on
// one side: "syscalls per record, aggregator side (syscall × transport)".
func MatrixTitle(what string, side Target) string {
	key := "syscall"
	if what != "syscalls" {
		key = "key"
	}
	return fmt.Sprintf(matrixTitleOf, what, side, key)
}

// Tables is every table of a trace result (ADR 0037): the runs, seed
// 000's category split, one matrix per side and count map with keys as
// rows and transports as columns (per record), the histograms and stats.
func Tables(rows []Row) []bench.TitledTable {
	if len(rows) == 0 {
		return nil
	}
	out := []bench.TitledTable{{Title: TitleRuns, Table: runsTable(rows)}}
	var srows []SyscallRow
	for _, r := range rows {
		if s, err := PerRecord(r, compareTop); err == nil {
			srows = append(srows, s)
		}
	}
	if len(srows) > 0 {
		out = append(out, bench.TitledTable{Title: TitleCompare, Table: compareTable(srows)})
	}
	for _, m := range Matrices(rows) {
		out = append(out, bench.TitledTable{Title: m.Title, Table: m.Table()})
	}
	if t := histTable(rows); len(t.Rows) > 0 {
		out = append(out, bench.TitledTable{Title: TitleHists, Table: t})
	}
	if t := statsTable(rows); len(t.Rows) > 0 {
		out = append(out, bench.TitledTable{Title: TitleStats, Table: t})
	}
	return out
}

func runsTable(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "size", "script", "side", "processes", "records", "written", "producer writes", "attach ms", "printf lines"}}
	for _, r := range rows {
		t.Add(r.Transport, r.Size, r.Script, string(r.Side), len(r.PIDs), r.Records, r.Written, r.ProducerWrites, fmt.Sprintf("%.0f", r.AttachMs), r.PrintfLines)
	}
	return t
}

// Matrix is one count map of one script on one side, per record, with
// its keys as rows and the transports (× sizes) as columns.
type Matrix struct {
	Title   string
	Script  string
	Side    Target
	Map     string // "@syscalls" for the syscalls
	Columns []string
	Keys    []string
	// PerRecord[k][c] is key k's count over column c's records; NaN where
	// column c has no such row.
	PerRecord [][]float64
}

// Matrices groups rows by (script, side, count map) into per-record
// matrices, syscalls first. Keys are ordered by their largest value in any
// column, largest first.
func Matrices(rows []Row) []Matrix {
	type id struct {
		script string
		side   Target
		name   string
	}
	sizes := map[int]bool{}
	for _, r := range rows {
		sizes[r.Size] = true
	}
	var order []id
	cells := map[id]map[string]map[string]float64{} // key → column → per record
	columns := map[id][]string{}
	add := func(m id, column, key string, count, records int64) {
		if cells[m] == nil {
			cells[m] = map[string]map[string]float64{}
			order = append(order, m)
		}
		if !slices.Contains(columns[m], column) {
			columns[m] = append(columns[m], column)
		}
		if cells[m][key] == nil {
			cells[m][key] = map[string]float64{}
		}
		cells[m][key][column] += float64(count) / float64(records)
	}
	for _, r := range rows {
		if r.Records <= 0 {
			continue
		}
		col := r.label(len(sizes))
		for _, kc := range r.Syscalls {
			add(id{r.Script, r.Side, "@syscalls"}, col, kc.Key, kc.Count, r.Records)
		}
		for _, m := range r.Counts {
			if len(r.Syscalls) > 0 && m.Name == "@total" {
				continue // producer_syscalls' @total is the syscall matrix's total line
			}
			for _, kc := range m.Counts {
				add(id{r.Script, r.Side, m.Name}, col, kc.Key, kc.Count, r.Records)
			}
		}
	}
	// Syscalls first, aggregator before producer (the receiving side is
	// the one the transports differ most on), then by script and map.
	slices.SortStableFunc(order, func(a, b id) int {
		return cmp.Or(cmp.Compare(boolRank(a.name != "@syscalls"), boolRank(b.name != "@syscalls")),
			cmp.Compare(a.script, b.script), cmp.Compare(a.name, b.name), cmp.Compare(a.side, b.side))
	})
	var out []Matrix
	for _, m := range order {
		mx := Matrix{Script: m.script, Side: m.side, Map: m.name, Columns: columns[m]}
		what := m.script + " " + m.name
		if m.name == "@syscalls" {
			what = "syscalls"
		}
		mx.Title = MatrixTitle(what, m.side)
		peak := map[string]float64{}
		for k, byCol := range cells[m] {
			mx.Keys = append(mx.Keys, k)
			for _, v := range byCol {
				peak[k] = max(peak[k], v)
			}
		}
		slices.SortFunc(mx.Keys, func(a, b string) int { return cmp.Or(cmp.Compare(peak[b], peak[a]), cmp.Compare(a, b)) })
		for _, k := range mx.Keys {
			line := make([]float64, len(mx.Columns))
			for c, col := range mx.Columns {
				v, ok := cells[m][k][col]
				if !ok {
					v = math.NaN()
				}
				line[c] = v
			}
			mx.PerRecord = append(mx.PerRecord, line)
		}
		out = append(out, mx)
	}
	return out
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Table renders the matrix: one line per key (with its category for
// syscalls), one column per transport, and a total line.
func (m *Matrix) Table() *bench.Table {
	syscalls := m.Map == "@syscalls"
	t := &bench.Table{Header: []string{"syscall"}}
	if !syscalls {
		t.Header[0] = m.Map
	} else {
		t.Header = append(t.Header, "cat")
	}
	t.Header = append(t.Header, m.Columns...)
	totals := make([]float64, len(m.Columns))
	for i, k := range m.Keys {
		cells := []any{orEmpty(k)}
		if syscalls {
			cells = append(cells, catMark(trace.CategoryOf(k)))
		}
		for c, v := range m.PerRecord[i] {
			cells = append(cells, formatPerRecord(v))
			if !math.IsNaN(v) {
				totals[c] += v
			}
		}
		t.Add(cells...)
	}
	if len(m.Keys) > 1 {
		cells := []any{"total"}
		if syscalls {
			cells = append(cells, "")
		}
		for _, v := range totals {
			cells = append(cells, formatPerRecord(v))
		}
		t.Add(cells...)
	}
	return t
}

// formatPerRecord keeps three significant figures: per-record counts run
// from 0.001 (a runtime call every thousand records) to thousands.
func formatPerRecord(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v == 0:
		return "0"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 0.1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func orEmpty(k string) string {
	if k == "" {
		return "(no key)"
	}
	return k
}

func histTable(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "size", "script", "side", "histogram", "key", "samples", "per record", "p50 in", "p99 in", "max in"}}
	for _, r := range rows {
		for _, h := range r.Hists {
			n := h.Samples()
			if n == 0 {
				continue
			}
			p50, _ := h.Quantile(0.5)
			p99, _ := h.Quantile(0.99)
			top, _ := h.Quantile(1)
			per := "-"
			if r.Records > 0 {
				per = formatPerRecord(float64(n) / float64(r.Records))
			}
			t.Add(r.Transport, r.Size, r.Script, string(r.Side), h.Name, orEmpty(h.Key), n, per, p50.Label(), p99.Label(), top.Label())
		}
	}
	return t
}

func statsTable(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "size", "script", "side", "stat", "key", "count", "average", "total"}}
	for _, r := range rows {
		for _, s := range r.Stats {
			t.Add(r.Transport, r.Size, r.Script, string(r.Side), s.Name, orEmpty(s.Key), s.Count, s.Average, s.Total)
		}
	}
	return t
}
