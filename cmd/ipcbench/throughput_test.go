package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/forwardbench"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// --output null: the aggregator writes to /dev/null and the rows are filled
// from its records_out_total, so a lossless transport must show written ==
// sent, and written must be nonzero (a scrape that found nothing would give
// zero and "lose" everything). It also runs the grid twice (--runs 2): the
// result must keep one median row per cell, and shm's row must carry its
// ratio to the unixsock row.
func TestThroughputNullOutputCountsFromMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the aggregator and producers")
	}
	withBinaries(t)
	out := filepath.Join(t.TempDir(), "tp.json")
	stdout, _ := ipcbench(t, throughput.Kind, "--quick", "--no-progress", "--output", "null", "--transport", "unixsock,shm",
		"--size", "100", "--producers", "1", "--rate", "20000", "--runs", "2", "--json", out)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// The terminal printed exactly the kind's tables of the saved rows,
	// which is what the report renders (internal/report's
	// TestReportTablesAreTheTerminals).
	var saved struct{ Rows []throughput.Row }
	if err := json.Unmarshal(b, &saved); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	if err := bench.WriteTables(&want, throughput.Tables(saved.Rows)); err != nil {
		t.Fatal(err)
	}
	if stdout != want.String() {
		t.Errorf("stdout is not the tables of the saved rows:\n%s\nwant:\n%s", stdout, want.String())
	}
	var res struct {
		Params struct {
			Output string
			Runs   int
		}
		Rows []struct {
			Transport           string
			Sent, Written, Lost int64
			RecordsPerS         float64 `json:"records_per_s"`
			VsUnixsock          float64 `json:"vs_unixsock"`
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Params.Output != "null" || res.Params.Runs != 2 || len(res.Rows) != 2 {
		t.Fatalf("params.output %q, runs %d with %d rows, want null, 2 runs and 2 rows:\n%s", res.Params.Output, res.Params.Runs, len(res.Rows), b)
	}
	unix, shm := res.Rows[0], res.Rows[1]
	if unix.Transport != "unixsock" || shm.Transport != "shm" || unix.VsUnixsock != 0 ||
		shm.VsUnixsock != shm.RecordsPerS/unix.RecordsPerS {
		t.Errorf("rows %s %v (x%v), %s %v (x%v): want shm's vs_unixsock to be its rate over unixsock's", unix.Transport,
			unix.RecordsPerS, unix.VsUnixsock, shm.Transport, shm.RecordsPerS, shm.VsUnixsock)
	}
	for _, r := range res.Rows {
		if r.Sent == 0 || r.Written != r.Sent || r.Lost != 0 {
			t.Errorf("%s: sent %d, written %d, lost %d; want written == sent > 0", r.Transport, r.Sent, r.Written, r.Lost)
		}
	}
}

// The count flags are read by the count parser (bench.ParseCount, where
// 1k is 1000; the size parser made --producers 1k 1024): a byte unit on a
// count is refused.
func TestThroughputCountsAreNotSizes(t *testing.T) {
	for _, args := range [][]string{{"--producers", "1,1KiB"}, {"--rate", "4KB"}, {"--runs", "2KiB"}} {
		if err := runThroughput(t.Context(), args); err == nil || !strings.Contains(err.Error(), "bad count") {
			t.Errorf("%v: %v, want a bad count", args, err)
		}
	}
}

func TestThroughputRejectsUnknownOutput(t *testing.T) {
	if err := runThroughput(t.Context(), []string{"--output", "tmpfs"}); !errors.Is(err, throughput.ErrBadOptions) {
		t.Fatalf("--output tmpfs: %v, want throughput.ErrBadOptions", err)
	}
}

// --forward kafka runs the forward kind (package forwardbench) against an
// in-process kfake cluster: the saved result is of that kind, its params
// and rows are the kind's, and stdout is its tables of the saved rows.
func TestThroughputForwardCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the aggregator and producers twice per cell")
	}
	withBinaries(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	out := filepath.Join(t.TempDir(), "fw.json")
	stdout, _ := ipcbench(t, throughput.Kind, "--forward", "kafka", "--brokers", strings.Join(cluster.ListenAddrs(), ","),
		"--quick", "--no-progress", "--transport", "unixsock", "--size", "200", "--producers", "1", "--rate", "2k", "--json", out)
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var p forwardbench.Params
	var rows []forwardbench.Row
	res, err := bench.ReadResult(f, &p, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != forwardbench.Kind || p.Rate != 2000 || len(p.Brokers) != 1 || len(rows) != 1 {
		t.Fatalf("kind %q, params %+v, %d rows; want %s, rate 2000, one broker, one row", res.Kind, p, len(rows), forwardbench.Kind)
	}
	if r := rows[0]; r.Written == 0 || r.Produced != r.Written || r.Baseline == nil {
		t.Errorf("written %d, produced %d, baseline %v: want every written record acknowledged and a baseline run", r.Written, r.Produced, r.Baseline != nil)
	}
	var want strings.Builder
	if err := bench.WriteTables(&want, forwardbench.Tables(rows)); err != nil {
		t.Fatal(err)
	}
	if stdout != want.String() {
		t.Errorf("stdout is not the tables of the saved rows:\n%s\nwant:\n%s", stdout, want.String())
	}
}
