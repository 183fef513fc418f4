package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/ipclab/logagg/internal/bench"
)

// Trace results (and any kind this package does not know) are rendered by
// shape rather than by type, so that `ipcbench trace` can add fields
// without a change here:
//   - scalar fields of a row become table columns;
//   - an object whose values are lists of {min,max,count} buckets is a set
//     of histograms (internal/trace Output.Hists: name → key → buckets);
//   - an object whose values are all numbers is a count map (Output.Maps:
//     name → key → count), drawn as a bar chart and listed as a table;
//   - other objects are walked into, with their key as a prefix.

// value is a JSON value that remembers the order of object keys, because
// columns should appear in the order the producer wrote them.
type value struct {
	keys   []string
	obj    map[string]*value // non-nil for objects
	arr    []*value          // non-nil for arrays
	scalar any               // json.Number, string, bool or nil
	isArr  bool
}

var errDepth = errors.New("JSON nested too deeply")

func parseOrdered(raw []byte) (*value, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func readValue(dec *json.Decoder, depth int) (*value, error) {
	if depth > 64 {
		return nil, errDepth
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := &value{obj: map[string]*value{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				child, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := v.obj[k]; !dup {
					v.keys = append(v.keys, k)
				}
				v.obj[k] = child
			}
			_, err := dec.Token() // '}'
			return v, err
		case '[':
			v := &value{isArr: true, arr: []*value{}}
			for dec.More() {
				child, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, child)
			}
			_, err := dec.Token() // ']'
			return v, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return &value{scalar: t}, nil
	}
}

func (v *value) isObj() bool    { return v != nil && v.obj != nil }
func (v *value) isScalar() bool { return v != nil && v.obj == nil && !v.isArr }

func (v *value) number() (float64, bool) {
	if v == nil {
		return 0, false
	}
	if n, ok := v.scalar.(json.Number); ok && v.isScalar() {
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func (v *value) String() string {
	switch s := v.scalar.(type) {
	case nil:
		return ""
	case string:
		return s
	case json.Number:
		return s.String()
	default:
		return fmt.Sprint(s)
	}
}

// field finds an object's key case-insensitively (Go's encoding/json
// writes Output's untagged fields as "Min", others write "min").
func (v *value) field(name string) *value {
	if !v.isObj() {
		return nil
	}
	if c, ok := v.obj[name]; ok {
		return c
	}
	for _, k := range v.keys {
		if strings.EqualFold(k, name) {
			return v.obj[k]
		}
	}
	return nil
}

// bucket is one histogram bucket, as in internal/trace: Min and Max are
// math.MinInt64 / math.MaxInt64 for open-ended buckets.
type bucket struct {
	Min, Max int64
	Count    float64
}

func (v *value) asBucket() (bucket, bool) {
	if !v.isObj() || len(v.keys) > 3 {
		return bucket{}, false
	}
	c, ok := v.field("count").number()
	if !ok {
		return bucket{}, false
	}
	b := bucket{Min: math.MinInt64, Max: math.MaxInt64, Count: c}
	for _, k := range v.keys {
		switch strings.ToLower(k) {
		case "count":
		case "min", "max":
			n, ok := v.obj[k].scalar.(json.Number)
			if !ok {
				return bucket{}, false
			}
			i, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil {
				return bucket{}, false
			}
			if strings.EqualFold(k, "min") {
				b.Min = i
			} else {
				b.Max = i
			}
		default:
			return bucket{}, false
		}
	}
	return b, true
}

func (v *value) asBuckets() ([]bucket, bool) {
	if v == nil || !v.isArr || len(v.arr) == 0 {
		return nil, false
	}
	out := make([]bucket, 0, len(v.arr))
	for _, e := range v.arr {
		b, ok := e.asBucket()
		if !ok {
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// asCounts reports whether v is a non-empty object of numbers.
func (v *value) asCounts() ([]kvNum, bool) {
	if !v.isObj() || len(v.keys) == 0 {
		return nil, false
	}
	out := make([]kvNum, 0, len(v.keys))
	for _, k := range v.keys {
		n, ok := v.obj[k].number()
		if !ok {
			return nil, false
		}
		out = append(out, kvNum{k, n})
	}
	return out, true
}

type kvNum struct {
	k string
	n float64
}

type histSet struct {
	name string   // the histogram's name, e.g. "@lat_ns"
	keys []string // its keys ("" for a histogram without keys)
	bs   [][]bucket
}

type countMap struct {
	name string
	kv   []kvNum
}

// shape is what the walk found in one row.
type shape struct {
	label   string
	scalars []kv
	hists   []histSet
	counts  []countMap
	lists   []objList
	skipped []string
}

// objList is a list of flat objects (e.g. a trace row's top syscalls),
// shown as a table and, when its objects are named, as a bar chart.
type objList struct {
	name string
	objs []*value
}

func flatObjects(vs []*value) bool {
	for _, v := range vs {
		if !v.isObj() {
			return false
		}
		for _, k := range v.keys {
			if !v.obj[k].isScalar() {
				return false
			}
		}
	}
	return len(vs) > 0
}

// listTable renders an objList; its bar chart plots, per object, the
// "per_record" field if there is one, else the first numeric field,
// labelled by the first string field.
func listTable(l objList) (*bench.Table, *plotSpec) {
	var cols []string
	seen := map[string]bool{}
	for _, o := range l.objs {
		for _, k := range o.keys {
			if !seen[k] {
				seen[k] = true
				cols = append(cols, k)
			}
		}
	}
	t := &bench.Table{Header: cols}
	labelCol, valCol := "", ""
	for _, c := range cols {
		v := l.objs[0].field(c)
		if _, ok := v.number(); ok {
			if valCol == "" || c == "per_record" {
				valCol = c
			}
		} else if labelCol == "" && v != nil && v.scalar != nil {
			labelCol = c
		}
	}
	var kvs []kvNum
	for _, o := range l.objs {
		cells := make([]any, len(cols))
		for i, c := range cols {
			v := o.obj[c]
			if v == nil {
				cells[i] = "-"
				continue
			}
			cells[i] = orDash(v.String())
		}
		t.Add(cells...)
		if labelCol != "" && valCol != "" {
			n, _ := o.obj[valCol].number()
			kvs = append(kvs, kvNum{o.obj[labelCol].String(), n})
		}
	}
	if len(kvs) == 0 {
		return t, nil
	}
	ps := countPlot(l.name+" ("+valCol+")", l.name, valCol, kvs)
	return t, ps
}

func walkRow(v *value) *shape {
	sh := &shape{}
	if !v.isObj() {
		sh.scalars = append(sh.scalars, kv{"value", v.String()})
		return sh
	}
	sh.walk(v, "", 0)
	var parts []string
	for _, s := range sh.scalars {
		// Short strings name a row (transport, script, side); a long one
		// (a script's header line) would swamp every title.
		if _, err := strconv.ParseFloat(s.v, 64); err == nil || s.v == "" || len(s.v) > 24 || len(parts) == 3 {
			continue
		}
		parts = append(parts, s.v)
	}
	sh.label = strings.Join(parts, " ")
	return sh
}

func (sh *shape) walk(v *value, prefix string, depth int) {
	for _, k := range v.keys {
		c := v.obj[k]
		name := prefix + k
		nested := prefix != ""
		switch {
		case nested && c.isScalar() && c.scalar == nil:
			// Null fields of nested objects (an Output's unused Printf)
			// would only add empty columns.
		case c.isScalar():
			sh.scalars = append(sh.scalars, kv{name, c.String()})
		case c.isArr:
			if bs, ok := c.asBuckets(); ok {
				sh.hists = append(sh.hists, histSet{name: name, keys: []string{""}, bs: [][]bucket{bs}})
				continue
			}
			scal := true
			parts := make([]string, len(c.arr))
			for i, e := range c.arr {
				if !e.isScalar() {
					scal = false
					break
				}
				parts[i] = e.String()
			}
			switch {
			case scal:
				sh.scalars = append(sh.scalars, kv{name, strings.Join(parts, ",")})
			case flatObjects(c.arr):
				sh.lists = append(sh.lists, objList{name, c.arr})
			default:
				sh.skipped = append(sh.skipped, fmt.Sprintf("%s (a list of %d objects)", name, len(c.arr)))
			}
		case len(c.keys) == 0:
			// An empty map at the top of a row says nothing was counted;
			// deeper down it is an unused part of a bigger structure (an
			// Output's Stats), not worth a column.
			if !nested {
				sh.scalars = append(sh.scalars, kv{name, "(empty)"})
			}
		default:
			sh.object(c, name, depth)
		}
	}
}

func (sh *shape) object(c *value, name string, depth int) {
	if kvs, ok := c.asCounts(); ok {
		sh.counts = append(sh.counts, countMap{name, kvs})
		return
	}
	// name → key → buckets (Output.Hists) or key → buckets.
	if hs, ok := histsOf(c, name); ok {
		sh.hists = append(sh.hists, hs...)
		return
	}
	// name → key → count (Output.Maps).
	allCounts := true
	for _, k := range c.keys {
		if _, ok := c.obj[k].asCounts(); !ok && !(c.obj[k].isObj() && len(c.obj[k].keys) == 0) {
			allCounts = false
			break
		}
	}
	if allCounts {
		for _, k := range c.keys {
			if kvs, ok := c.obj[k].asCounts(); ok {
				sh.counts = append(sh.counts, countMap{k, kvs})
			} else {
				sh.scalars = append(sh.scalars, kv{name + "." + k, "(empty)"})
			}
		}
		return
	}
	if depth >= 3 {
		sh.skipped = append(sh.skipped, name)
		return
	}
	sh.walk(c, name+".", depth+1)
}

func histsOf(c *value, name string) ([]histSet, bool) {
	// key → buckets
	one := histSet{name: name}
	for _, k := range c.keys {
		bs, ok := c.obj[k].asBuckets()
		if !ok {
			one.keys = nil
			break
		}
		one.keys = append(one.keys, k)
		one.bs = append(one.bs, bs)
	}
	if len(one.keys) > 0 {
		return []histSet{one}, true
	}
	// hist name → key → buckets
	var out []histSet
	for _, hn := range c.keys {
		h := c.obj[hn]
		if !h.isObj() {
			return nil, false
		}
		hs := histSet{name: hn}
		for _, k := range h.keys {
			bs, ok := h.obj[k].asBuckets()
			if !ok {
				return nil, false
			}
			hs.keys = append(hs.keys, k)
			hs.bs = append(hs.bs, bs)
		}
		if len(hs.keys) > 0 {
			out = append(out, hs)
		}
	}
	return out, len(out) > 0
}

// traceSection renders trace rows; genericSection renders unknown kinds
// the same way.
func traceSection(s *section, in *Input) error { return shapeSection(s, in) }

func genericSection(s *section, in *Input) error { return shapeSection(s, in) }

func shapeSection(s *section, in *Input) error {
	if len(in.Rows) == 0 || string(in.Rows) == "null" {
		return nil
	}
	root, err := parseOrdered(in.Rows)
	if err != nil {
		return err
	}
	var rows []*value
	switch {
	case root.isArr:
		rows = root.arr
	case root.isObj():
		rows = []*value{root}
	default:
		rows = []*value{root}
	}
	var shapes []*shape
	var cols []string
	seen := map[string]bool{}
	for _, r := range rows {
		sh := walkRow(r)
		shapes = append(shapes, sh)
		for _, c := range sh.scalars {
			if !seen[c.k] {
				seen[c.k] = true
				cols = append(cols, c.k)
			}
		}
	}
	if len(cols) > 0 {
		t := &bench.Table{Header: cols}
		for _, sh := range shapes {
			m := map[string]string{}
			for _, c := range sh.scalars {
				m[c.k] = c.v
			}
			cells := make([]any, len(cols))
			for i, c := range cols {
				cells[i] = orDash(m[c])
			}
			t.Add(cells...)
		}
		s.tables = append(s.tables, table{"rows", t})
	}
	if ps := perRecordPlot(shapes); ps != nil {
		s.plots = append(s.plots, ps)
	}
	for i, sh := range shapes {
		label := sh.label
		if label == "" {
			label = fmt.Sprintf("row %d", i+1)
		}
		if len(shapes) == 1 && sh.label == "" {
			label = ""
		}
		prefix := ""
		if label != "" {
			prefix = label + ": "
		}
		for _, sk := range sh.skipped {
			s.notes = append(s.notes, prefix+"not shown: "+sk)
		}
		for _, l := range sh.lists {
			t, ps := listTable(objList{prefix + l.name, l.objs})
			s.tables = append(s.tables, table{prefix + l.name, t})
			if ps != nil {
				s.plots = append(s.plots, ps)
			}
		}
		for _, cm := range sh.counts {
			kvs := append([]kvNum(nil), cm.kv...)
			sort.SliceStable(kvs, func(a, b int) bool { return kvs[a].n > kvs[b].n })
			t := &bench.Table{Header: []string{"key", "count"}}
			var total float64
			for _, e := range kvs {
				t.Add(e.k, formatNum(e.n))
				total += e.n
			}
			t.Add("total", formatNum(total))
			s.tables = append(s.tables, table{prefix + cm.name, t})
			title := prefix + cm.name
			s.plots = append(s.plots, countPlot(title, title, "count", kvs))
		}
		if len(sh.hists) > 0 {
			t := &bench.Table{Header: []string{"histogram", "key", "samples", "buckets", "lowest bucket", "highest bucket", "mode bucket"}}
			for _, h := range sh.hists {
				for j, k := range h.keys {
					bs := h.bs[j]
					var n float64
					mode := 0
					for bi, b := range bs {
						n += b.Count
						if b.Count > bs[mode].Count {
							mode = bi
						}
					}
					t.Add(h.name, orDash(k), formatNum(n), len(bs), bucketLabel(bs[0]), bucketLabel(bs[len(bs)-1]), bucketLabel(bs[mode]))
					title := prefix + h.name
					if k != "" {
						title += "[" + k + "]"
					}
					short := prefix + h.name
					if k != "" {
						short += "[" + k + "]"
					}
					s.plots = append(s.plots, histPlot(title, short, bs))
				}
			}
			s.tables = append(s.tables, table{prefix + "histograms", t})
		}
	}
	return nil
}

func formatNum(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 6, 64)
}

// maxBars bounds a count map's bar chart; the table lists every key.
const maxBars = 25

// countPlot draws a count map; title is the figure caption, name the short
// title inside the plot, xlabel what the values are.
func countPlot(title, name, xlabel string, kvs []kvNum) *plotSpec {
	if len(kvs) > maxBars {
		title += fmt.Sprintf(" (top %d of %d)", maxBars, len(kvs))
		name += fmt.Sprintf(" (top %d of %d)", maxBars, len(kvs))
		kvs = kvs[:maxBars]
	}
	labels := make([]string, len(kvs))
	vals := make([]float64, len(kvs))
	for i, e := range kvs {
		labels[i], vals[i] = e.k, e.n
	}
	h := vg.Length(len(kvs))*0.28*vg.Inch + 1.2*vg.Inch
	return &plotSpec{title: title, w: halfW, h: h,
		draw: func() (*plot.Plot, error) { return horizontalBars(name, xlabel, labels, vals) }}
}

func histPlot(title, name string, bs []bucket) *plotSpec {
	labels := make([]string, len(bs))
	vals := make([]float64, len(bs))
	for i, b := range bs {
		labels[i], vals[i] = bucketLabel(b), b.Count
	}
	h := vg.Length(len(bs))*0.28*vg.Inch + 1.2*vg.Inch
	return &plotSpec{title: title + " histogram", w: halfW, h: h,
		draw: func() (*plot.Plot, error) { return horizontalBars(name, "count", labels, vals) }}
}

// bucketLabel writes a bucket as bpftrace does: [2K, 4K) for a power-of-2
// bucket, (..., 0) and [100, ...) for open ends.
func bucketLabel(b bucket) string {
	lo := "(..."
	if b.Min != math.MinInt64 {
		lo = "[" + humanInt(b.Min)
	}
	hi := "...)"
	if b.Max != math.MaxInt64 {
		if b.Max < math.MaxInt64 {
			hi = humanInt(b.Max+1) + ")"
		}
	}
	return lo + ", " + hi
}

func humanInt(n int64) string {
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

// perRecordPlot compares rows on their numeric "*per_record" columns
// (seed 000's syscalls-per-record table), one group of bars per column.
func perRecordPlot(shapes []*shape) *plotSpec {
	if len(shapes) < 2 {
		return nil
	}
	var cols []string
	seen := map[string]bool{}
	for _, sh := range shapes {
		for _, c := range sh.scalars {
			if _, err := strconv.ParseFloat(c.v, 64); err == nil && strings.HasSuffix(c.k, "per_record") && !seen[c.k] {
				seen[c.k] = true
				cols = append(cols, c.k)
			}
		}
	}
	if len(cols) == 0 {
		return nil
	}
	cats := make([]string, len(shapes))
	groups := make([]barGroup, len(cols))
	for i, c := range cols {
		groups[i] = barGroup{c, make([]float64, len(shapes))}
	}
	for j, sh := range shapes {
		cats[j] = sh.label
		if cats[j] == "" {
			cats[j] = fmt.Sprintf("row %d", j+1)
		}
		for _, c := range sh.scalars {
			for i, col := range cols {
				if c.k == col {
					groups[i].vals[j], _ = strconv.ParseFloat(c.v, 64)
				}
			}
		}
	}
	return &plotSpec{title: "per record, by row", w: wideW, h: wideH + 0.4*vg.Inch, wide: true,
		draw: func() (*plot.Plot, error) { return groupedBars("Per record", "per record", cats, groups, wideW) }}
}
