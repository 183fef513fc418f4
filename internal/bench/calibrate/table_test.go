package calibrate

import (
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
)

func TestTablesCycles(t *testing.T) {
	rows := []Row{
		{Name: "getpid", MedianNs: 100, FastestBatchNs: 90, SlowestBatchNs: 120, Batches: 11, OpsPerBatch: 5000, Source: "raw syscall"},
		{Name: "rdtscp", MedianNs: 10, Batches: 1, OpsPerBatch: 1000000, Source: "C helper"},
	}
	// Without a TSC rate there are no cycles columns at all.
	plain := Tables(rows)[0].Table
	if strings.Contains(strings.Join(plain.Header, "|"), "cycles") {
		t.Errorf("cycles column without a TSC rate: %v", plain.Header)
	}
	for i := range rows {
		rows[i].TSCPerNs = 2.5
	}
	tt := Tables(rows)[0]
	if !strings.Contains(tt.Title, "per-batch means") || !strings.Contains(tt.Title, "TSC ticks") {
		t.Errorf("title does not say what min/max and cycles are: %q", tt.Title)
	}
	cell := func(row int, col string) string {
		for i, h := range tt.Table.Header {
			if h == col {
				return tt.Table.Rows[row][i]
			}
		}
		t.Fatalf("no column %q in %v", col, tt.Table.Header)
		return ""
	}
	if got := cell(0, "median cycles"); got != "250" {
		t.Errorf("getpid median cycles %q, want 250", got)
	}
	if got := cell(0, "batch means, cycles"); got != "225-300" {
		t.Errorf("getpid batch-mean cycles %q, want 225-300", got)
	}
	// One batch has no spread: a dash, not the median repeated as min and max.
	if got := cell(1, "fastest batch mean ns"); got != "-" {
		t.Errorf("single-batch row shows a spread: %q", got)
	}
}

func TestCalibrationTables(t *testing.T) {
	c := &bench.Calibration{GetpidNs: 100, TSCPerNs: 3, Checks: []Check{
		{Name: "constant_tsc", Value: "present", Verdict: bench.VerdictOK, Why: "x"},
		{Name: "clocksource", Value: "hpet", Verdict: bench.VerdictWarn, Why: "y"},
	}}
	ts := CalibrationTables(c)
	if len(ts) != 2 || ts[1].Title != "machine checks (1 of 2 warn)" {
		t.Fatalf("tables %+v", ts)
	}
	rows := map[string][]string{}
	for _, r := range ts[0].Table.Rows {
		rows[r[0]] = r
	}
	if got := rows["getpid (cheap syscall)"]; got[1] != "100.0" || got[2] != "300" {
		t.Errorf("getpid not shown in ns and cycles: %q", got)
	}
	if got := rows["sched_yield"]; got[1] != "not measured" || got[2] != "-" {
		t.Errorf("unmeasured figure shown as %q", got)
	}
	// A result saved before the checks existed has only the figures.
	if ts := CalibrationTables(&bench.Calibration{}); len(ts) != 1 {
		t.Errorf("old block gave %d tables", len(ts))
	}
}
