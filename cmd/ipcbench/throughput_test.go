package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// --output null: the aggregator writes to /dev/null and the rows are filled
// from its records_out_total, so a lossless transport must show written ==
// sent, and written must be nonzero (a scrape that found nothing would give
// zero and "lose" everything).
func TestThroughputNullOutputCountsFromMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the aggregator and producers")
	}
	withBinaries(t)
	out := filepath.Join(t.TempDir(), "tp.json")
	ipcbench(t, "throughput", "--quick", "--no-progress", "--output", "null", "--transport", "unixsock,shm",
		"--size", "100", "--producers", "1", "--rate", "20000", "--json", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Params struct{ Output string }
		Rows   []struct {
			Transport           string
			Sent, Written, Lost int64
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Params.Output != "null" || len(res.Rows) != 2 {
		t.Fatalf("params.output %q with %d rows, want null with 2:\n%s", res.Params.Output, len(res.Rows), b)
	}
	for _, r := range res.Rows {
		if r.Sent == 0 || r.Written != r.Sent || r.Lost != 0 {
			t.Errorf("%s: sent %d, written %d, lost %d; want written == sent > 0", r.Transport, r.Sent, r.Written, r.Lost)
		}
	}
}

func TestThroughputRejectsUnknownOutput(t *testing.T) {
	if err := runThroughput(t.Context(), []string{"--output", "tmpfs"}); err == nil {
		t.Fatal("--output tmpfs accepted")
	}
}
