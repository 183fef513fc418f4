package tracebench

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/trace"
)

// SyscallShare is one syscall's count in a SyscallRow.
type SyscallShare struct {
	Name      string         `json:"name"`
	Category  trace.Category `json:"category"`
	Count     int64          `json:"count"`
	PerRecord float64        `json:"per_record"`
}

// SyscallRow is seed 000's comparison, normalized: syscalls per record on
// one side (producer or aggregator) of one transport, split by where they
// come from (trace.CategoryOf). Runtime + Transp + Other = Total (Transp
// is the transport category; Transport names the transport).
type SyscallRow struct {
	Transport string  `json:"transport"`
	Side      Target  `json:"side"`
	Records   int64   `json:"records"` // sent by the producers
	Syscalls  int64   `json:"syscalls"`
	Total     float64 `json:"per_record"`
	Runtime   float64 `json:"runtime_per_record"`
	Transp    float64 `json:"transport_per_record"`
	Other     float64 `json:"other_per_record"`
	// Top lists the most frequent syscalls, most frequent first.
	Top []SyscallShare `json:"top"`
}

// ErrNoSyscalls is returned by PerRecord for a row that is not a
// producer_syscalls row or has nothing to divide.
var ErrNoSyscalls = errors.New("no syscall counts")

// PerRecord turns a producer_syscalls row into syscalls per record sent,
// keeping the top n syscalls (n <= 0: all).
func PerRecord(r Row, n int) (SyscallRow, error) {
	counts := r.Maps["@syscalls"]
	if len(counts) == 0 || r.Records <= 0 {
		return SyscallRow{}, fmt.Errorf("%w: %s %s on %s (records %d)", ErrNoSyscalls, r.Script, r.Target, r.Transport, r.Records)
	}
	out := SyscallRow{Transport: r.Transport, Side: r.Target, Records: r.Records}
	den := float64(r.Records)
	var byCat [3]int64
	for name, c := range counts {
		out.Syscalls += c
		switch trace.CategoryOf(name) {
		case trace.Runtime:
			byCat[0] += c
		case trace.Transport:
			byCat[1] += c
		default:
			byCat[2] += c
		}
		out.Top = append(out.Top, SyscallShare{Name: name, Category: trace.CategoryOf(name), Count: c, PerRecord: float64(c) / den})
	}
	out.Total = float64(out.Syscalls) / den
	out.Runtime, out.Transp, out.Other = float64(byCat[0])/den, float64(byCat[1])/den, float64(byCat[2])/den
	sort.Slice(out.Top, func(i, j int) bool {
		if out.Top[i].Count != out.Top[j].Count {
			return out.Top[i].Count > out.Top[j].Count
		}
		return out.Top[i].Name < out.Top[j].Name
	})
	if n > 0 && len(out.Top) > n {
		out.Top = out.Top[:n]
	}
	return out, nil
}

// CompareTable renders SyscallRows: one line per transport and side, the
// category split, and the top syscalls with their category initial
// (R runtime, T transport, O other).
func CompareTable(rows []SyscallRow) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "side", "records", "syscalls", "per record", "runtime", "transport", "other", "top syscalls per record"}}
	for _, r := range rows {
		var top []string
		for _, s := range r.Top {
			top = append(top, fmt.Sprintf("%s %.2f%s", s.Name, s.PerRecord, catMark(s.Category)))
		}
		t.Add(r.Transport, string(r.Side), r.Records, r.Syscalls, fmt.Sprintf("%.2f", r.Total),
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

// Table renders generic trace rows: per row, the totals of each map and
// histogram, so that a terminal shows at a glance what the script saw (the
// full data is in the rows, for the report).
func Table(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "script", "target", "pids", "records", "written", "what", "key", "value"}}
	for _, r := range rows {
		first := true
		add := func(what, key string, v any) {
			if first {
				t.Add(r.Transport, r.Script, string(r.Target), len(r.PIDs), r.Records, r.Written, what, key, v)
				first = false
				return
			}
			t.Add("", "", "", "", "", "", what, key, v)
		}
		for _, name := range trace.Keys(r.Maps) {
			kv := r.Maps[name]
			keys := trace.Keys(kv)
			sort.SliceStable(keys, func(i, j int) bool { return kv[keys[i]] > kv[keys[j]] })
			for i, k := range keys {
				if i == 8 {
					add(name, fmt.Sprintf("(%d more keys)", len(keys)-8), r.Total(name)-sumKeys(kv, keys[:8]))
					break
				}
				add(name, k, kv[k])
			}
		}
		for _, name := range trace.Keys(r.Hists) {
			for _, k := range trace.Keys(r.Hists[name]) {
				bs := r.Hists[name][k]
				add(name+" (hist)", k, fmt.Sprintf("n=%d p50≈%s max≈%s", bucketsTotal(bs), bucketQuantile(bs, 0.5), bucketQuantile(bs, 1)))
			}
		}
		if r.PrintfLines > 0 {
			add("printf", "lines", r.PrintfLines)
		}
		if first {
			add("(nothing printed)", "", "")
		}
	}
	return t
}

func sumKeys(kv map[string]int64, keys []string) int64 {
	var s int64
	for _, k := range keys {
		s += kv[k]
	}
	return s
}

func bucketsTotal(bs []Bucket) uint64 {
	var n uint64
	for _, b := range bs {
		n += b.Count
	}
	return n
}

// bucketQuantile returns the upper bound of the bucket holding quantile q,
// as "<N" (a histogram only knows the bucket).
func bucketQuantile(bs []Bucket, q float64) string {
	total := bucketsTotal(bs)
	if total == 0 {
		return "-"
	}
	want := uint64(q * float64(total))
	want = max(want, 1)
	var run uint64
	for _, b := range bs {
		run += b.Count
		if run >= want {
			if b.Max == nil {
				return fmt.Sprintf(">=%d", *b.Min)
			}
			return fmt.Sprintf("<=%d", *b.Max)
		}
	}
	return "-"
}
