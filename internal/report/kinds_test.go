package report

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/conns"
	"github.com/ipclab/logagg/internal/bench/forwardbench"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// decodeAndTable decodes a result's rows into T and returns what the
// terminal prints for them (tables(rows), as cmd/ipcbench's publish does).
func decodeAndTable[T any](tables func([]T) []bench.TitledTable) func(json.RawMessage) ([]bench.TitledTable, error) {
	return func(raw json.RawMessage) ([]bench.TitledTable, error) {
		var rows []T
		if err := decodeRows(raw, &rows); err != nil {
			return nil, err
		}
		return tables(rows), nil
	}
}

// The report's tables of a saved result are the terminal's: the same
// titles, headers and cells, for every kind that has its Tables.
func TestReportTablesAreTheTerminals(t *testing.T) {
	forward, err := json.Marshal([]*forwardbench.Row{{
		Load:    &throughput.Measurement{Rows: []throughput.Row{{Transport: "unixsock", Producers: 1, Size: 200, Sent: 1000, Written: 1000, DaemonCPUNs: 900}}},
		Written: 1000, Produced: 1000, RecordsPerS: 5000, AckP50S: 0.002, AggCPUNs: 900,
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		kind     string
		fixture  json.RawMessage // rows; nil: testdata/<kind>.json
		terminal func(json.RawMessage) ([]bench.TitledTable, error)
	}{
		{kind: throughput.Kind, terminal: decodeAndTable(throughput.Tables)},
		{kind: forwardbench.Kind, fixture: forward, terminal: decodeAndTable(forwardbench.Tables)},
		{kind: peers.Kind, terminal: decodeAndTable(peers.Tables)},
		{kind: conns.Kind, terminal: decodeAndTable(conns.Tables)},
		{kind: latency.Kind, terminal: decodeAndTable(latency.Tables)},
	} {
		t.Run(c.kind, func(t *testing.T) {
			in := &Input{Name: c.kind, Result: &bench.Result{Kind: c.kind}, Rows: c.fixture}
			if c.fixture == nil {
				var err error
				if in, err = Load(filepath.Join("testdata", c.kind+".json")); err != nil {
					t.Fatal(err)
				}
			}
			want, err := c.terminal(in.Rows)
			if err != nil {
				t.Fatal(err)
			}
			s := resultSection(1, in)
			if len(s.tables) != len(want) {
				t.Fatalf("report has %d tables, terminal %d (notes: %s)", len(s.tables), len(want), strings.Join(s.notes, "; "))
			}
			for i, w := range want {
				got := s.tables[i]
				if got.caption != w.Title || !reflect.DeepEqual(got.t.Header, w.Table.Header) || !reflect.DeepEqual(got.t.Rows, w.Table.Rows) {
					t.Errorf("table %d differs:\nreport   %q %q\n         %q\nterminal %q %q\n         %q", i,
						got.caption, got.t.Header, got.t.Rows, w.Title, w.Table.Header, w.Table.Rows)
				}
				if len(w.Table.Rows) == 0 {
					t.Errorf("table %d of the fixture is empty: the comparison proves nothing", i)
				}
			}
			for _, p := range s.plots {
				if strings.TrimSpace(p.reading) == "" {
					t.Errorf("plot %q has no reading", p.title)
				}
			}
		})
	}
}
