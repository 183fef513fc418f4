package report

import (
	"encoding/json"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/ipclab/logagg/internal/bench"
)

// Plot sizes: two half-width plots side by side, or one wide plot.
const (
	halfW = 5 * vg.Inch
	halfH = 3.2 * vg.Inch
	wideW = 10 * vg.Inch
	wideH = 3.4 * vg.Inch
)

// decodeRows decodes a result's rows; a null or absent rows field is an
// empty list, not an error (a run that measured nothing still has notes).
func decodeRows(raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// addTables adds a kind's tables (its Tables function, the same the
// terminal prints) to s, each captioned with its title.
func addTables(s *section, tables []bench.TitledTable) {
	for _, tt := range tables {
		s.tables = append(s.tables, table{tt.Title, tt.Table})
	}
}

// legendRoom raises a bar chart's y axis above its tallest bar (and
// above floor) so that the legend in the top corner covers no bar.
func legendRoom(p *plot.Plot, groups []barGroup, floor float64) {
	top := floor
	for _, g := range groups {
		for _, v := range g.vals {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				top = max(top, v)
			}
		}
	}
	if top > 0 {
		p.Y.Max = niceCeil(top * (1 + 0.12*float64(len(groups)+1)))
	}
}

// niceCeil rounds v up to a round multiple of a power of ten, so that the
// default ticker's ticks are round numbers.
func niceCeil(v float64) float64 {
	e := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*e >= v {
			return m * e
		}
	}
	return 10 * e
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
