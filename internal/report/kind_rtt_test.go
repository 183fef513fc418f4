package report

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/ipclab/logagg/internal/bench/rtt"
)

// The report shows exactly the terminal's rtt tables (rtt.Tables), and
// every rtt plot says what it shows.
func TestRTTSectionRendersTheTerminalTables(t *testing.T) {
	in, err := Load(filepath.Join("testdata", "rtt.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rows []rtt.Row
	if err := json.Unmarshal(in.Rows, &rows); err != nil {
		t.Fatal(err)
	}
	s := &section{}
	if err := rttSection(s, in); err != nil {
		t.Fatal(err)
	}
	want := rtt.Tables(rows)
	if len(s.tables) != len(want) {
		t.Fatalf("%d tables, terminal has %d", len(s.tables), len(want))
	}
	for i, tt := range want {
		got := s.tables[i]
		if got.caption != tt.Title || !reflect.DeepEqual(got.t.Header, tt.Table.Header) || !reflect.DeepEqual(got.t.Rows, tt.Table.Rows) {
			t.Errorf("table %d: report %q %v, terminal %q %v", i, got.caption, got.t.Header, tt.Title, tt.Table.Header)
		}
	}
	placements := map[string]bool{}
	for _, r := range rows {
		placements[r.Placement] = true
	}
	if !placements[rtt.PlaceSame] || !placements[rtt.PlaceCross] || len(s.plots) != len(placements) {
		t.Errorf("fixture placements %v, %d plots: want same and cross, one plot each", placements, len(s.plots))
	}
	for _, p := range s.plots {
		if p.reading == "" {
			t.Errorf("plot %q has no reading", p.title)
		}
	}
}
