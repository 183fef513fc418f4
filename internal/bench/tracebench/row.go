package tracebench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/ipclab/logagg/internal/trace"
)

// Row is what one script showed on one side of one transport's run, typed
// so that the terminal and the report read the same fields (ADR 0037).
type Row struct {
	Transport string `json:"transport"`
	Size      int    `json:"size"`
	Script    string `json:"script"`
	Header    string `json:"header,omitempty"` // the script's "name - what it answers"
	Side      Target `json:"side"`
	PIDs      []int  `json:"pids"`
	Producers int    `json:"producers"`
	Rate      int    `json:"rate"`
	// Records is what the producers sent (their own count): the
	// denominator of every per-record figure.
	Records int64 `json:"records"`
	// Written is the number of lines in the aggregator's output when the
	// trace stopped.
	Written int64 `json:"written"`
	// ProducerWrites is the producers' own count of write calls.
	ProducerWrites int64 `json:"producer_writes"`
	// Syscalls is producer_syscalls' @syscalls by syscall name (resolved
	// from the x86_64 number), most frequent first; empty for other scripts.
	Syscalls []KeyCount `json:"syscalls,omitempty"`
	// Counts are the script's other count maps, by name.
	Counts []CountMap `json:"counts,omitempty"`
	// Hists are its histograms, one per map name and key.
	Hists []Hist `json:"hists,omitempty"`
	// Stats are its stats()/avg() aggregates.
	Stats []Stat `json:"stats,omitempty"`
	// Printf holds the first MaxPrintf printf lines; PrintfLines counts all.
	Printf      []string `json:"printf,omitempty"`
	PrintfLines int      `json:"printf_lines"`
	AttachMs    float64  `json:"attach_ms"`
}

// MaxPrintf bounds Row.Printf.
const MaxPrintf = 200

// KeyCount is one key of a count map.
type KeyCount struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

// CountMap is one bpftrace count map ("@calls"), most frequent key first.
type CountMap struct {
	Name   string     `json:"name"`
	Counts []KeyCount `json:"counts"`
}

// Hist is one key of one bpftrace histogram: @lat_ns[write].
type Hist struct {
	Name    string   `json:"name"`
	Key     string   `json:"key,omitempty"`
	Buckets []Bucket `json:"buckets"`
}

// Bucket holds the Count values v with Lo <= v < Hi. Lo is math.MinInt64
// on the underflow bucket (bpftrace's "(..., 0)") and Hi math.MaxInt64 on
// an open top bucket ("[100, ...)", and hist()'s last, see
// trace.TopBucketMin).
type Bucket struct {
	Lo    int64  `json:"lo"`
	Hi    int64  `json:"hi"`
	Count uint64 `json:"count"`
}

// Stat is one key of a stats()/avg() aggregate.
type Stat struct {
	Name    string `json:"name"`
	Key     string `json:"key,omitempty"`
	Count   int64  `json:"count"`
	Average int64  `json:"average"`
	Total   int64  `json:"total"`
}

// Label writes the bucket as bpftrace does: [2K, 4K), (..., 0), [2G, ...).
func (b Bucket) Label() string {
	lo, hi := "(...", "...)"
	if b.Lo != math.MinInt64 {
		lo = "[" + HumanInt(b.Lo)
	}
	if b.Hi != math.MaxInt64 {
		hi = HumanInt(b.Hi) + ")"
	}
	return lo + ", " + hi
}

// HumanInt writes n with a binary suffix when it is a whole multiple of
// one (2048 → 2K), as bpftrace labels its buckets.
func HumanInt(n int64) string {
	for _, u := range []struct {
		div int64
		suf string
	}{{1 << 40, "T"}, {1 << 30, "G"}, {1 << 20, "M"}, {1 << 10, "K"}} {
		if n != 0 && n%u.div == 0 {
			return strconv.FormatInt(n/u.div, 10) + u.suf
		}
	}
	return strconv.FormatInt(n, 10)
}

// Samples sums a histogram's buckets.
func (h *Hist) Samples() uint64 {
	var n uint64
	for _, b := range h.Buckets {
		n += b.Count
	}
	return n
}

// Quantile is the bucket holding quantile q (0 < q <= 1) of the samples;
// false for an empty histogram.
func (h *Hist) Quantile(q float64) (Bucket, bool) {
	total := h.Samples()
	if total == 0 {
		return Bucket{}, false
	}
	want := max(uint64(math.Ceil(q*float64(total))), 1)
	var run uint64
	for _, b := range h.Buckets {
		run += b.Count
		if run >= want {
			return b, true
		}
	}
	return h.Buckets[len(h.Buckets)-1], true
}

// Count is the named count map's value at key, 0 when absent.
func (r *Row) Count(name, key string) int64 {
	for _, m := range r.Counts {
		if m.Name == name {
			for _, kc := range m.Counts {
				if kc.Key == key {
					return kc.Count
				}
			}
		}
	}
	return 0
}

// Syscall is the row's count of one syscall, 0 when absent.
func (r *Row) Syscall(name string) int64 {
	for _, kc := range r.Syscalls {
		if kc.Key == name {
			return kc.Count
		}
	}
	return 0
}

// TotalSyscalls sums Syscalls.
func (r *Row) TotalSyscalls() int64 {
	var t int64
	for _, kc := range r.Syscalls {
		t += kc.Count
	}
	return t
}

func (r Row) hasTopBucket() bool {
	for _, h := range r.Hists {
		for _, b := range h.Buckets {
			if b.Lo == trace.TopBucketMin && b.Count > 0 {
				return true
			}
		}
	}
	return false
}

// label names the row's transport, with its size when a result holds
// several sizes: the column of the per-record matrices.
func (r *Row) label(sizes int) string {
	if sizes > 1 {
		return fmt.Sprintf("%s %dB", r.Transport, r.Size)
	}
	return r.Transport
}

// rowFrom converts a decoded output into a Row's typed fields, sorted so
// that a result's JSON is the same for the same counts.
func rowFrom(o *trace.Output) Row {
	var r Row
	if o == nil {
		return r
	}
	for _, name := range trace.Keys(o.Maps) {
		if name == "@syscalls" {
			r.Syscalls = keyCounts(o.SyscallCounts())
			continue
		}
		r.Counts = append(r.Counts, CountMap{Name: name, Counts: keyCounts(o.Maps[name])})
	}
	for _, name := range trace.Keys(o.Hists) {
		for _, k := range trace.Keys(o.Hists[name]) {
			r.Hists = append(r.Hists, Hist{Name: name, Key: k, Buckets: convertBuckets(o.Hists[name][k])})
		}
	}
	for _, name := range trace.Keys(o.Stats) {
		for _, k := range trace.Keys(o.Stats[name]) {
			st := o.Stats[name][k]
			r.Stats = append(r.Stats, Stat{Name: name, Key: k, Count: st.Count, Average: st.Average, Total: st.Total})
		}
	}
	r.PrintfLines = len(o.Printf)
	r.Printf = o.Printf[:min(len(o.Printf), MaxPrintf)]
	return r
}

// keyCounts lists a count map most frequent first, ties by key.
func keyCounts(m map[string]int64) []KeyCount {
	out := make([]KeyCount, 0, len(m))
	for k, v := range m {
		out = append(out, KeyCount{Key: k, Count: v})
	}
	slices.SortFunc(out, func(a, b KeyCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// convertBuckets turns trace's inclusive [Min, Max] into [Lo, Hi).
func convertBuckets(bs []trace.Bucket) []Bucket {
	out := make([]Bucket, len(bs))
	for i, b := range bs {
		out[i] = Bucket{Lo: b.Min, Hi: math.MaxInt64, Count: b.Count}
		if b.Max != math.MaxInt64 {
			out[i].Hi = b.Max + 1
		}
	}
	return out
}
