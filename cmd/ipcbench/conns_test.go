package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/conns"
	"github.com/ipclab/logagg/internal/testenv"
)

// ipcbench conns --quick: for each transport a 0-idle row and a row with
// 1000 idle connections, which the aggregator itself must have counted
// (its logagg_connections), with its threads within 4×GOMAXPROCS+16, and
// the producers' records all written.
func TestConnsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the aggregator and producers")
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < 2*1000+4096 {
		testenv.SkipOrFail(t, "RLIMIT_NOFILE hard limit below the 6096 descriptors 1000 idle connections need")
	}
	withBinaries(t)
	out := filepath.Join(t.TempDir(), "conns.json")
	stdout, _ := ipcbench(t, conns.Kind, "--quick", "--no-progress", "--json", out)
	for _, want := range []string{"transport", "idle", "threads ok", "B/conn", "unixsock", "tcp"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var p conns.Params
	var rows []conns.Row
	res, err := bench.ReadResult(f, &p, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != conns.Kind || len(p.Idle) != 2 || p.Idle[1] != 1000 || p.Duration != "1s" {
		t.Fatalf("kind %q params %+v, want conns with the quick grid 0,1000 for 1s", res.Kind, p)
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows, want 4 (unixsock and tcp, 0 and 1000 idle):\n%s", len(rows), stdout)
	}
	for i, r := range rows {
		want := []string{"unixsock", "tcp"}[i/2]
		idle := []int{0, 1000}[i%2]
		if r.Transport != want || r.Idle != idle || r.Error != "" {
			t.Fatalf("row %d: %s with %d idle (error %q), want %s with %d", i, r.Transport, r.Idle, r.Error, want, idle)
		}
		if r.Held != int64(idle) {
			t.Errorf("%s: the aggregator counted %d idle connections, want %d", r.Transport, r.Held, idle)
		}
		if r.FDs < idle || r.FDLimit < uint64(idle) {
			t.Errorf("%s %d idle: %d fds, limit %d", r.Transport, idle, r.FDs, r.FDLimit)
		}
		if r.ThreadBound != 4*r.GOMAXPROCS+16 || r.Threads < 1 || r.Threads > r.ThreadBound || r.ThreadsAfterClose > r.ThreadBound {
			t.Errorf("%s %d idle: %d threads (%d after close), bound %d", r.Transport, idle, r.Threads, r.ThreadsAfterClose, r.ThreadBound)
		}
		if r.Sent == 0 || r.Written != r.Sent || r.Lost != 0 {
			t.Errorf("%s %d idle: sent %d, written %d, lost %d", r.Transport, idle, r.Sent, r.Written, r.Lost)
		}
		if r.RunCPUNs <= 0 {
			t.Errorf("%s %d idle: no aggregator CPU per record while the producers ran", r.Transport, idle)
		}
		if r.IdleRSSKiB <= 0 || r.RSSKiB <= 0 || !r.Compared {
			t.Errorf("%s %d idle: RSS %d/%d KiB, compared %v", r.Transport, idle, r.IdleRSSKiB, r.RSSKiB, r.Compared)
		}
		if idle > 0 && r.VsNoIdle <= 0 {
			t.Errorf("%s: no ratio to the 0-idle row", r.Transport)
		}
	}
}

// Bad flags are refused before anything runs, with the binaries found so
// that the error is the flag's.
func TestConnsRejectsBadFlags(t *testing.T) {
	withBinaries(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--transport", "udp"}, `transport "udp"`},
		{[]string{"--size", "100,1K"}, "one record size"},
		{[]string{"--idle", "10,x"}, "flag -idle"},
		{[]string{"--idle", "1KiB"}, "size, not a count"},
		{[]string{"--cpus", "all"}, "cpus"},
	} {
		if err := runConns(t.Context(), c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want one about %s", c.args, err, c.want)
		}
	}
}
