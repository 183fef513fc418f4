package report

import (
	"bytes"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/tracebench"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden.md from the current output")

// fixtureKinds are the checked-in results, one per kind the report knows.
var fixtureKinds = []string{"calibrate", "rtt", "latency", "bufsweep", "throughput", "conns", "peers", "trace", "trace-latency", "trace-overhead"}

// fixturePlots is how many plots the fixtures must produce:
// rtt 2 (median/p99 bars, same-core and cross-core) + samples 5 series × 3 (seed 004's main
// histogram, outlier histogram, time series) + latency 2 (one-way and
// round-trip percentile curves, one size) + bufsweep 3 (MB/s, writes and
// measured loss vs buffer) + throughput 2 (records/s and CPU per record by buffer) + conns 2
// (records/s and RSS per idle connection by idle count) + peers 1
// (records/s per daemon) + trace 2 (the syscall × transport dot plots,
// aggregator and producer side) + trace-latency 5 (the @calls dot plot and
// the @lat_ns histograms of epoll_pwait, futex, read and write, transports
// overlaid) + trace-overhead 1 (one-way percentile curves of every tracer
// state).
const fixturePlots = 2 + 15 + 2 + 3 + 2 + 2 + 1 + 2 + 5 + 1

func fixtureReport(t testing.TB) *Report {
	t.Helper()
	r := &Report{Title: "ipcbench report (fixtures)"}
	for _, k := range fixtureKinds {
		in, err := Load(filepath.Join("testdata", k+".json"))
		if err != nil {
			t.Fatal(err)
		}
		r.Inputs = append(r.Inputs, in)
	}
	s, err := LoadSamples(filepath.Join("testdata", "rtt-samples.csv"))
	if err != nil {
		t.Fatal(err)
	}
	r.Samples = append(r.Samples, s)
	r.Runs = []Run{
		{Name: "calibrate", Duration: 1200 * time.Millisecond, Result: "lab/calibrate.json", Log: "lab/calibrate.log"},
		{Name: "peers", Duration: 300 * time.Millisecond, Err: "exit status 1: rsyslog not installed", Log: "lab/peers.log"},
	}
	r.Notes = []string{"fixture report: numbers are from one quick run on the lab VM"}
	return r
}

func TestMarkdownGolden(t *testing.T) {
	var b bytes.Buffer
	if err := fixtureReport(t).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "report.golden.md")
	if *update {
		if err := os.WriteFile(golden, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./internal/report -run Golden -update to create it)", err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		got, wl := strings.Split(b.String(), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(got) || i < len(wl); i++ {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("markdown differs from %s at line %d:\n got: %q\nwant: %q\n(-update rewrites the golden file)", golden, i+1, g, w)
			}
		}
	}
	// Rendering twice gives the same bytes (no map-order leaks).
	var b2 bytes.Buffer
	if err := fixtureReport(t).WriteMarkdown(&b2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), b2.Bytes()) {
		t.Fatal("markdown is not deterministic")
	}
}

var (
	reSection = regexp.MustCompile(`<section id="([^"]+)">\n<h2>([^<]*)</h2>`)
	reFigure  = regexp.MustCompile(`(?s)<figure class="plot[^"]*" id="[^"]+">\n(<svg width="([0-9.]+)pt" height="([0-9.]+)pt".*?</svg>)`)
	reRemote  = regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//|<link[\s>]|@import|url\(`)
)

func renderHTML(t testing.TB, r *Report) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestHTMLStructure(t *testing.T) {
	h := renderHTML(t, fixtureReport(t))
	var titles []string
	for _, m := range reSection.FindAllStringSubmatch(h, -1) {
		titles = append(titles, m[2])
	}
	// The answers first, the machine and the runs last.
	want := []string{
		"Answers", "Notes",
		"rtt: testdata/rtt.json", "rtt samples: testdata/rtt-samples.csv", "latency: testdata/latency.json",
		"bufsweep: testdata/bufsweep.json", "throughput: testdata/throughput.json", "conns: testdata/conns.json", "peers: testdata/peers.json",
		"trace: testdata/trace.json", "trace: testdata/trace-latency.json", "trace-overhead: testdata/trace-overhead.json",
		"Runs", "Calibration: this machine&#39;s floor", "Host",
	}
	if strings.Join(titles, "\n") != strings.Join(want, "\n") {
		t.Fatalf("sections:\n%s\nwant:\n%s", strings.Join(titles, "\n"), strings.Join(want, "\n"))
	}
	figs := reFigure.FindAllStringSubmatch(h, -1)
	if len(figs) != fixturePlots || strings.Count(h, "<figure") != fixturePlots {
		t.Fatalf("%d plots with an inline SVG (%d <figure>), want %d", len(figs), strings.Count(h, "<figure"), fixturePlots)
	}
	for _, f := range figs {
		w, _ := strconv.ParseFloat(f[2], 64)
		ht, _ := strconv.ParseFloat(f[3], 64)
		if w <= 0 || ht <= 0 {
			t.Errorf("plot of size %sx%s", f[2], f[3])
		}
		// A drawn plot has axes and data: many path elements, and text.
		if strings.Count(f[1], "<path") < 5 || !strings.Contains(f[1], "<text") {
			t.Errorf("plot looks empty: %.300s", f[1])
		}
	}
	if strings.Contains(h, "plot-missing") {
		t.Error("a plot could not be drawn")
	}
	if m := reRemote.FindString(h); m != "" {
		t.Fatalf("report is not self-contained: found %q", m)
	}
	for _, s := range []string{"<?xml", "<script src"} {
		if strings.Contains(h, s) {
			t.Fatalf("report contains %q", s)
		}
	}
	// The failed run and the calibration figures are visible.
	for _, s := range []string{"peers failed: exit status 1: rsyslog not installed", "FAILED", "cache-line round trip", "getpid (cheap syscall)"} {
		if !strings.Contains(h, s) {
			t.Errorf("report lacks %q", s)
		}
	}
}

var (
	reAnswers = regexp.MustCompile(`(?s)<section id="answers">.*?</section>`)
	reDT      = regexp.MustCompile(`<dt>([^<]*)</dt><dd>(.*?)</dd>`)
	reHref    = regexp.MustCompile(`href="#([^"]*)"`)
	reID      = regexp.MustCompile(`\sid="([^"]*)"`)
)

// The report opens with the answers: one per question the lab exists
// for, each saying something and linking to the section it comes from;
// every in-page link of the report resolves.
func TestAnswersComeFirstAndLink(t *testing.T) {
	h := renderHTML(t, fixtureReport(t))
	first := reSection.FindStringSubmatch(h)
	if first == nil || first[1] != AnswersID {
		t.Fatalf("first section is %q, want %q", first, AnswersID)
	}
	block := reAnswers.FindString(h)
	ids := map[string]bool{}
	for _, m := range reID.FindAllStringSubmatch(h, -1) {
		ids[m[1]] = true
	}
	qa := reDT.FindAllStringSubmatch(block, -1)
	if len(qa) != len(questions) {
		t.Fatalf("%d answers, want one per question (%d):\n%s", len(qa), len(questions), block)
	}
	for i, m := range qa {
		if m[1] != strings.ReplaceAll(questions[i].text, "'", "&#39;") {
			t.Errorf("answer %d is to %q, want %q", i, m[1], questions[i].text)
		}
		links := reHref.FindAllStringSubmatch(m[2], -1)
		if len(links) != 1 {
			t.Errorf("%s: %d links, want one to its section: %s", m[1], len(links), m[2])
			continue
		}
		if !strings.HasPrefix(links[0][1], "r") || !ids[links[0][1]] {
			t.Errorf("%s: links to #%s, which is no result section", m[1], links[0][1])
		}
		if strings.Contains(m[2], "not measured") || strings.Contains(m[2], "could not be read") {
			t.Errorf("%s: the fixtures answer it, but: %s", m[1], m[2])
		}
	}
	for _, m := range reHref.FindAllStringSubmatch(h, -1) {
		if !ids[m[1]] {
			t.Errorf("link to #%s, which no element has", m[1])
		}
	}
	// A question no result answers says how to answer it, or that its run
	// failed (linking to the runs).
	r := fixtureReport(t)
	var kept []*Input
	for _, in := range r.Inputs {
		if in.Result.Kind != "peers" && in.Result.Kind != "bufsweep" {
			kept = append(kept, in)
		}
	}
	r.Inputs = kept
	d := r.build()
	for _, a := range d.sections[0].answers {
		switch a.question {
		case "How do we compare with the peer daemons?":
			if !strings.Contains(a.text, "`ipcbench peers` failed (exit status 1: rsyslog not installed)") || a.link != "runs" {
				t.Errorf("peers' run failed, answer: %q -> #%s", a.text, a.link)
			}
		case "What does buffering buy?":
			if !strings.Contains(a.text, "not measured in this report: run `ipcbench bufsweep") || a.link != "" {
				t.Errorf("no bufsweep result, answer: %q -> #%s", a.text, a.link)
			}
		}
	}
}

func TestCalibrationFromAnyResult(t *testing.T) {
	// Without a calibrate result, the first result carrying a block is used.
	in, err := Load(filepath.Join("testdata", "rtt.json"))
	if err != nil {
		t.Fatal(err)
	}
	cal, err := Load(filepath.Join("testdata", "calibrate.json"))
	if err != nil {
		t.Fatal(err)
	}
	in.Result.Calibration = cal.Result.Calibration
	var b bytes.Buffer
	if err := (&Report{Inputs: []*Input{in}}).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "- from: `testdata/rtt.json`") || !strings.Contains(b.String(), "| getpid (cheap syscall) | 144.9 | 376 |") {
		t.Fatalf("calibration block not taken from the rtt result:\n%.1500s", b.String())
	}
	b.Reset()
	if err := (&Report{}).WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "No result carries a calibration block") {
		t.Fatalf("empty report:\n%s", b.String())
	}
}

func TestBadInputs(t *testing.T) {
	for name, data := range map[string]string{
		"not json":  "hello",
		"no kind":   `{"rows": []}`,
		"truncated": `{"kind": "rtt", "rows": [`,
	} {
		if _, err := Decode(name, strings.NewReader(data)); !errors.Is(err, ErrBadInput) {
			t.Errorf("%s: err = %v, want ErrBadInput", name, err)
		}
	}
	for name, data := range map[string]string{
		"header":     "a,b,c,d\n",
		"fields":     SamplesHeader + "\npipe,100,0\n",
		"not number": SamplesHeader + "\npipe,100,0,x\n",
		"empty":      "",
	} {
		if _, err := ReadSamples(name, strings.NewReader(data)); !errors.Is(err, ErrBadInput) {
			t.Errorf("samples %s: err = %v, want ErrBadInput", name, err)
		}
	}
}

// Rows of the wrong shape, zero latencies (a log axis cannot show them)
// and an unknown kind must render, never panic.
func TestOddInputsRender(t *testing.T) {
	var ins []*Input
	for _, js := range []string{
		`{"kind":"rtt","rows":{"not":"a list"}}`,
		`{"kind":"latency","rows":[{"mode":"raw","transport":"x","size":1,"one_way":{"p50":0,"percentiles":[{"percentile":50,"ns":0},{"percentile":99,"ns":0}]}}]}`,
		`{"kind":"bufsweep","rows":[{"transport":"tcp","buffer":0,"mb_per_s":0}]}`,
		`{"kind":"mystery","rows":[{"name":"a","n":1,"m":{"k":2}},{"name":"b","deep":{"x":{"y":{"z":{"w":[{"o":1}]}}}}}]}`,
		`{"kind":"trace","rows":null}`,
		`{"kind":"peers","rows":[]}`,
		`{"kind":"conns","rows":[{"transport":"tcp","idle":0,"error":"boom"},{"transport":"tcp","idle":5,"held":5,"records_per_s":0}]}`,
	} {
		in, err := Decode("odd.json", strings.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, in)
	}
	r := &Report{Inputs: ins, Samples: []*Samples{{Name: "one.csv", Series: []*Series{{Mechanism: "pipe", Size: 1, Ns: []float64{5}}}}}}
	h := renderHTML(t, r)
	for _, s := range []string{`rows not decoded as &#34;rtt&#34;`, "mystery: odd.json", `kind &#34;mystery&#34; is not one this ipcbench renders`, "fewer than 2 samples"} {
		if !strings.Contains(h, s) {
			t.Errorf("report lacks %q", s)
		}
	}
	var b bytes.Buffer
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
}

func TestNines(t *testing.T) {
	for p, want := range map[float64]float64{90: 1, 99: 2, 99.9: 3, 99.999: 5} {
		if got := nines(p); math.Abs(got-want) > 1e-9 {
			t.Errorf("nines(%v) = %v, want %v", p, got, want)
		}
	}
}

func BenchmarkWriteHTML(b *testing.B) {
	r := fixtureReport(b)
	b.ReportAllocs()
	for b.Loop() {
		var buf bytes.Buffer
		if err := r.WriteHTML(&buf); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(buf.Len()), "bytes/report")
	}
}

// The trace fixtures (written by `ipcbench trace --quick --transport
// unixsock,udp` and `--script syscall_latency`) render from their typed
// rows: the terminal's tables, the syscall × transport matrix per side with
// syscalls as rows and transports as columns, no raw-JSON fallback.
func TestTraceSection(t *testing.T) {
	in, err := Load(filepath.Join("testdata", "trace.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := resultSection(1, in)
	tables := map[string]*bench.Table{}
	for _, tb := range s.tables {
		tables[tb.caption] = tb.t
	}
	for _, side := range []tracebench.Target{tracebench.TargetAggregator, tracebench.TargetProducer} {
		m := tables[tracebench.MatrixTitle("syscalls", side)]
		if m == nil {
			t.Fatalf("no %s matrix; tables: %v", side, sortedKeys(tables))
		}
		if want := []string{"syscall", "cat", "unixsock", "udp"}; strings.Join(m.Header, ",") != strings.Join(want, ",") {
			t.Errorf("%s matrix columns %v, want %v", side, m.Header, want)
		}
		keys := map[string][]string{}
		for _, r := range m.Rows {
			keys[r[0]] = r
		}
		if keys["write"] == nil || keys["futex"] == nil || keys["total"] == nil || len(m.Rows) < 10 {
			t.Errorf("%s matrix rows lack write, futex or total (%d rows)", side, len(m.Rows))
		}
		if m.Rows[len(m.Rows)-1][0] != "total" {
			t.Errorf("%s matrix does not end with its total", side)
		}
	}
	// The producer writes each record at least once on either transport
	// (more on unixsock: the netpoller's eventfd wake-ups are writes too).
	if w := tables[tracebench.MatrixTitle("syscalls", tracebench.TargetProducer)]; w != nil {
		for _, r := range w.Rows {
			if r[0] != "write" {
				continue
			}
			for _, c := range r[2:] {
				if v, err := strconv.ParseFloat(c, 64); err != nil || v < 1 {
					t.Errorf("producer writes per record %v, want >= 1 on both", r)
				}
			}
		}
	}
	if tables[tracebench.TitleCompare] == nil || len(s.plots) != 2 {
		t.Errorf("compare table %v, %d plots (want the two matrix dot plots)", tables[tracebench.TitleCompare] != nil, len(s.plots))
	}
	for _, n := range s.notes {
		if strings.Contains(n, "not decoded") || strings.Contains(n, "not one this ipcbench renders") {
			t.Errorf("trace section fell back: %s", n)
		}
	}
	if len(s.details) != 0 {
		t.Errorf("raw blocks in a typed trace section: %v", s.details)
	}
}

// A trace result written before typed rows says so instead of guessing.
func TestOlderTraceResult(t *testing.T) {
	in, err := Decode("old.json", strings.NewReader(`{"kind":"trace","rows":[{"transport":"tcp","script":"producer_syscalls","target":"producer","maps":{"@syscalls":{"write":3}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	s := resultSection(1, in)
	if len(s.tables) != 0 || len(s.details) != 1 || !strings.Contains(strings.Join(s.notes, "\n"), "written by an older ipcbench? rerun") {
		t.Errorf("old trace result: %d tables, details %v, notes %q", len(s.tables), s.details, s.notes)
	}
}
