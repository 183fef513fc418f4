package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
	"github.com/ipclab/logagg/internal/bench/rtt"
)

// The test binary doubles as ipcbench: with IPCBENCH_TEST_MAIN=1 (inherited
// by the echo children it re-executes) it runs main.
func TestMain(m *testing.M) {
	if os.Getenv("IPCBENCH_TEST_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ipcbench(t *testing.T, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "IPCBENCH_TEST_MAIN=1", "IPCBENCH_CACHE="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("ipcbench %v: %v\n%s", args, err, errb.String())
	}
	return out.String(), errb.String()
}

func TestRTTCommandEndToEnd(t *testing.T) {
	dir := t.TempDir()
	js, samples := filepath.Join(dir, "rtt.json"), filepath.Join(dir, "s.csv")
	out, _ := ipcbench(t, "rtt", "--quick", "--iterations", "150", "--transport", "pipe,unixsock,mq",
		"--size", "100,1K", "--placement", "same", "--json", js, "--samples", samples, "--no-calibrate")
	for _, want := range []string{"mechanism", "pipe", "unixsock", "mq", "1KiB"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []rtt.Row
	var p rtt.Params
	res, err := bench.ReadResult(f, &p, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != rtt.Kind || p.Iterations != 150 || !slices.Equal(p.Placements, []string{rtt.PlaceSame}) || res.Host.CPUs < 1 {
		t.Fatalf("result %+v params %+v", res, p)
	}
	goRows := 0
	for _, r := range rows {
		if r.Impl == "go" {
			goRows++
		}
		if r.Error != "" || r.Stats.N != 150 || r.Placement != rtt.PlaceSame {
			t.Errorf("row %s %d %s: n=%d err=%s", r.Mechanism, r.Size, r.Placement, r.Stats.N, r.Error)
		}
	}
	if goRows != 6 {
		t.Fatalf("go rows = %d, want 6 (3 mechanisms x 2 sizes)", goRows)
	}
	sf, err := os.Open(samples)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	recs, err := csv.NewReader(sf).ReadAll()
	if err != nil || len(recs) != 150*len(rows)+1 {
		t.Fatalf("csv: %d records for %d rows, %v", len(recs), len(rows), err)
	}
}

func TestCalibrateCommand(t *testing.T) {
	js := filepath.Join(t.TempDir(), "cal.json")
	out, _ := ipcbench(t, "calibrate", "--quick", "--json", js)
	for _, want := range []string{"getpid", "sched_yield", "machine checks", "constant_tsc", "frequency governor", "SMT siblings", "clocksource", "fastest batch mean ns"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []calibrate.Row
	res, err := bench.ReadResult(f, nil, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != calibrate.Kind || res.Calibration == nil || res.Calibration.GetpidNs < 20 || res.Calibration.GetpidNs > 100000 || len(rows) < 4 {
		t.Fatalf("calibrate result %+v rows %d", res.Calibration, len(rows))
	}
	// The saved block carries the same checks the terminal showed.
	if len(res.Calibration.Checks) < 5 {
		t.Fatalf("checks %+v", res.Calibration.Checks)
	}
	for _, c := range res.Calibration.Checks {
		if (c.Verdict != bench.VerdictOK && c.Verdict != bench.VerdictWarn) || !strings.Contains(out, c.Why) {
			t.Errorf("check %+v not shown as saved", c)
		}
	}
}

func TestUnknownSubcommandFails(t *testing.T) {
	cmd := exec.Command(os.Args[0], "nonsense")
	cmd.Env = append(os.Environ(), "IPCBENCH_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown subcommand") || !strings.Contains(string(out), "rtt") {
		t.Fatalf("err %v out %s", err, out)
	}
}
