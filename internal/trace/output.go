package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
)

// Bucket is one histogram bucket: values v with Min <= v <= Max were seen
// Count times. bpftrace omits min on the underflow bucket ("(..., 0)") and
// max on the overflow bucket of an lhist ("[100, ...)"): those come back as
// math.MinInt64 and math.MaxInt64.
type Bucket struct {
	Min   int64
	Max   int64
	Count uint64
}

// Stats is a stats()/avg() aggregate.
type Stats struct {
	Count   int64
	Average int64
	Total   int64
}

// Output is what one bpftrace run printed, decoded from `-f json`.
//
// Maps are keyed by the map name as bpftrace prints it (with the "@"), then
// by the key: "" for a map without keys, the decimal value for an integer
// key, several keys joined by "," as bpftrace joins them. When a map is
// printed more than once (print() in an interval probe) the last print wins.
type Output struct {
	AttachedProbes int
	Maps           map[string]map[string]int64
	Hists          map[string]map[string][]Bucket
	Stats          map[string]map[string]Stats
	Printf         []string // printf() output, one entry per call, newline kept
	Lines          int      // JSON lines decoded
}

func newOutput() *Output {
	return &Output{
		Maps:  map[string]map[string]int64{},
		Hists: map[string]map[string][]Bucket{},
		Stats: map[string]map[string]Stats{},
	}
}

// Count returns Maps[name][key] and whether it was printed.
func (o *Output) Count(name, key string) (int64, bool) {
	v, ok := o.Maps[name][key]
	return v, ok
}

// Total sums the values of a count map over all its keys.
func (o *Output) Total(name string) int64 {
	var t int64
	for _, v := range o.Maps[name] {
		t += v
	}
	return t
}

// HistCount sums the bucket counts of one histogram.
func HistCount(bs []Bucket) uint64 {
	var n uint64
	for _, b := range bs {
		n += b.Count
	}
	return n
}

// Keys returns the keys of a map or histogram, sorted, for stable output.
func Keys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// SyscallCounts resolves producer_syscalls' @syscalls (keyed by syscall
// number) to counts by syscall name.
func (o *Output) SyscallCounts() map[string]int64 {
	out := map[string]int64{}
	for k, v := range o.Maps["@syscalls"] {
		nr, err := strconv.Atoi(k)
		name := k
		if err == nil {
			name = SyscallName(nr)
		}
		out[name] += v
	}
	return out
}

// Parse decodes bpftrace `-f json` output, one JSON object per line. Blank
// lines are skipped; a line that is not JSON, or an object of a known type
// with an unexpected shape, is an error naming the line. Unknown types
// (time, join, lost_events, ...) are skipped so that newer bpftrace
// versions still parse.
func Parse(r io.Reader) (*Output, error) {
	o := newOutput()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), maxLine)
	n := 0
	for sc.Scan() {
		n++
		if err := o.addLine(sc.Bytes()); err != nil {
			return o, fmt.Errorf("trace: bpftrace output line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return o, fmt.Errorf("trace: reading bpftrace output: %w", err)
	}
	return o, nil
}

// maxLine bounds one JSON line: a map with BPFTRACE_MAP_KEYS_MAX (4096)
// keys of 64-byte strings is well under 1 MiB; 64 MiB leaves room for users
// who raise that limit.
const maxLine = 64 << 20

type line struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// addLine decodes one line into o and reports whether it was the
// attached_probes line.
func (o *Output) addLine(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil
	}
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("%w: %q", ErrBadOutput, truncate(b))
	}
	o.Lines++
	var err error
	switch l.Type {
	case "attached_probes":
		var d struct {
			Probes int `json:"probes"`
		}
		err = json.Unmarshal(l.Data, &d)
		o.AttachedProbes = d.Probes
	case "printf":
		var s string
		err = json.Unmarshal(l.Data, &s)
		o.Printf = append(o.Printf, s)
	case "map":
		err = decodeNamed(l.Data, func(name string, v json.RawMessage) error {
			m, err := decodeKeyed[int64](v)
			o.Maps[name] = m
			return err
		})
	case "hist":
		err = decodeNamed(l.Data, func(name string, v json.RawMessage) error {
			m, err := decodeKeyed[[]rawBucket](v)
			if err != nil {
				return err
			}
			h := make(map[string][]Bucket, len(m))
			for k, rb := range m {
				h[k] = convertBuckets(rb)
			}
			o.Hists[name] = h
			return nil
		})
	case "stats":
		err = decodeNamed(l.Data, func(name string, v json.RawMessage) error {
			m, err := decodeKeyed[Stats](v)
			o.Stats[name] = m
			return err
		})
	}
	if err != nil {
		return fmt.Errorf("%w: type %q: %w", ErrBadOutput, l.Type, err)
	}
	return nil
}

type rawBucket struct {
	Min   *int64 `json:"min"`
	Max   *int64 `json:"max"`
	Count uint64 `json:"count"`
}

// hist()'s last bucket as bpftrace 0.17 writes it in JSON. hist() has no
// bucket above [2G, 4G): every value from 2^31 on lands there (its text
// output says "[2G, 4G)"; 5e9 and 2e10 were counted in it too), and the
// JSON writer computes the bounds in 32-bit ints, which wrap to
// {"min": -2147483648, "max": 0}. A futex wait of a parked thread (seconds)
// showed up as an impossible negative bucket before this was decoded.
const (
	wrappedTopMin = math.MinInt32
	wrappedTopMax = 0
	// TopBucketMin is the real lower bound of that bucket: 2^31 ns, 2.1 s.
	TopBucketMin = 1 << 31
)

func convertBuckets(rb []rawBucket) []Bucket {
	out := make([]Bucket, len(rb))
	for i, b := range rb {
		out[i] = Bucket{Min: math.MinInt64, Max: math.MaxInt64, Count: b.Count}
		if b.Min != nil {
			out[i].Min = *b.Min
		}
		if b.Max != nil {
			out[i].Max = *b.Max
		}
		if out[i].Min == wrappedTopMin && out[i].Max == wrappedTopMax {
			out[i].Min, out[i].Max = TopBucketMin, math.MaxInt64
		}
	}
	return out
}

// decodeNamed calls fn for each "@name": value pair of a data object.
func decodeNamed(data json.RawMessage, fn func(string, json.RawMessage) error) error {
	var named map[string]json.RawMessage
	if err := json.Unmarshal(data, &named); err != nil {
		return err
	}
	for name, v := range named {
		if err := fn(name, v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// decodeKeyed decodes either a bare value (a map without keys, stored under
// "") or an object of key -> value. A keyless stats() prints an object too
// ({"count": …}), so an object that is not key -> V is tried as one V.
func decodeKeyed[V any](v json.RawMessage) (map[string]V, error) {
	var single V
	if !isObject(v) {
		if err := json.Unmarshal(v, &single); err != nil {
			return nil, err
		}
		return map[string]V{"": single}, nil
	}
	m := map[string]V{}
	err := json.Unmarshal(v, &m)
	if err == nil {
		return m, nil
	}
	if err2 := json.Unmarshal(v, &single); err2 == nil {
		return map[string]V{"": single}, nil
	}
	return nil, err
}

func isObject(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && v[0] == '{'
}

func truncate(b []byte) []byte {
	if len(b) > 120 {
		return b[:120]
	}
	return b
}
