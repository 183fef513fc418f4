package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportCommand renders the checked-in fixtures through the CLI, with
// flags after the file arguments.
func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	td := filepath.Join("..", "..", "internal", "report", "testdata")
	html, md := filepath.Join(dir, "r.html"), filepath.Join(dir, "r.md")
	out, _ := ipcbench(t, "report", filepath.Join(td, "calibrate.json"), filepath.Join(td, "rtt.json"),
		filepath.Join(td, "rtt-samples.csv"), filepath.Join(td, "trace.json"), "-o", html, "--md", md)
	if !strings.Contains(out, "report: ") || !strings.Contains(out, "r.html") {
		t.Fatalf("stdout does not say where the report is:\n%s", out)
	}
	h, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	// 2 rtt bar charts (same-core, cross-core) + 5 series × 3 sample plots
	// + 2 trace plots (the syscall × transport dot plot of each side).
	if n := strings.Count(string(h), `<figure class="plot`); n != 2+15+2 {
		t.Errorf("%d plots, want 19", n)
	}
	m, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Calibration", "## rtt: ", "## rtt samples: ", "## trace: ", "| c:unixsock |"} {
		if !strings.Contains(string(m), s) {
			t.Errorf("markdown lacks %q", s)
		}
	}
	// A file that is not a result is an error, not an empty report.
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"rows":[]}`), 0o644)
	cmd := exec.Command(os.Args[0], "report", bad, "-o", filepath.Join(dir, "x.html"))
	cmd.Env = append(os.Environ(), "IPCBENCH_TEST_MAIN=1")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "kind") {
		t.Fatalf("bad input: err %v, output %s", err, b)
	}
}

// TestAllQuickReduced runs `ipcbench all --quick` end to end with a reduced
// set of steps (calibrate, rtt and throughput), because the full quick lab
// takes about 80 s here without -race, over the package's time budget.
// throughput is made to fail (no aggregator binary on PATH) to prove that
// a failed step is reported and the others still make a report.
func TestAllQuickReduced(t *testing.T) {
	if testing.Short() {
		t.Skip("runs several benchmarks")
	}
	path := "/usr/bin:/bin"
	t.Setenv("PATH", path)
	if p, err := exec.LookPath("aggregator"); err == nil {
		t.Fatalf("an aggregator binary is on %s (%s); the test needs throughput to fail", path, p)
	}
	dir := t.TempDir()
	lab := filepath.Join(dir, "lab")
	html := filepath.Join(dir, "report.html")
	out, _ := ipcbench(t, "all", "--quick", "--only", "calibrate,rtt,throughput", "--dir", lab, "-o", html)
	for _, want := range []string{"== calibrate     ok", "== rtt           ok", "== throughput    FAILED", "report: " + html, "results: " + lab} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"calibrate.json", "rtt.json", "rtt-samples.csv", "calibrate.log", "throughput.log", "report.md"} {
		if _, err := os.Stat(filepath.Join(lab, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	h, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<section id="calibration">`, `<section id="runs">`, "rtt samples: ", "throughput failed: ", "cannot find the aggregator binary"} {
		if !strings.Contains(string(h), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// rtt quick measures every mechanism, each with three sample plots.
	if n := strings.Count(string(h), `<figure class="plot`); n < 3*8 {
		t.Errorf("only %d plots", n)
	}
	md, _ := os.ReadFile(filepath.Join(lab, "report.md"))
	if !strings.Contains(string(md), "| throughput | FAILED |") || !strings.Contains(string(md), "| rtt | ok |") {
		t.Errorf("markdown runs table:\n%s", md)
	}
	// A typo in --only is an error, not an empty lab.
	cmd := exec.Command(os.Args[0], "all", "--only", "rtt,nosuch", "--dir", filepath.Join(dir, "x"))
	cmd.Env = append(os.Environ(), "IPCBENCH_TEST_MAIN=1")
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), `unknown step "nosuch"`) {
		t.Fatalf("--only nosuch: err %v, output %s", err, b)
	}
}
