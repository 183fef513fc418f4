package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/bufsweep"
	"github.com/ipclab/logagg/internal/bench/calibrate"
	"github.com/ipclab/logagg/internal/bench/conns"
	"github.com/ipclab/logagg/internal/bench/forwardbench"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/rtt"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/bench/tracebench"
)

// Report is everything one report shows. Build it, then call WriteHTML
// and/or WriteMarkdown.
type Report struct {
	// Title is the document title; empty means "ipcbench report".
	Title string
	// Generated is shown under the title when non-zero.
	Generated time.Time
	Inputs    []*Input
	Samples   []*Samples
	// Runs are the subcommands `ipcbench all` ran, with their outcome, so
	// a failed one is visible in the report rather than silently missing.
	Runs []Run
	// Notes apply to the whole report.
	Notes []string
}

// Run is one subcommand run by `ipcbench all`.
type Run struct {
	Name     string
	Args     []string
	Duration time.Duration
	// Err is empty when the subcommand succeeded.
	Err string
	// Result and Log are the files it wrote ("" if none).
	Result string
	Log    string
}

// The document model: sections of tables, notes and plots, rendered by
// both writers so that the HTML and the Markdown never disagree.
type document struct {
	title    string
	subtitle string
	sections []*section
}

type section struct {
	id, title string
	rank      float64 // ordering by kind; stable within a rank
	meta      []kv
	tables    []table
	pres      []pre // preformatted blocks (seed-format tables)
	notes     []string
	plots     []*plotSpec
	details   []pre // collapsed blocks, HTML only (daemon configs)
	answers   []answer
}

type kv struct{ k, v string }

type table struct {
	caption string
	t       *bench.Table
}

type pre struct{ title, text string }

type plotSpec struct {
	title string
	// reading is the short text under the plot: what it shows and how to
	// read it (axes, what a good or bad curve looks like). Every plot has
	// one; TestEveryPlotSaysWhatItShows checks.
	reading string
	w, h    vg.Length
	wide    bool // spans the whole row of the plot grid
	draw    func() (*plot.Plot, error)
}

// Kind ranks: the experiments in the order of the lab's questions, trace
// results, and anything unknown last (the calibration block, the host and
// the runs follow them all, see build).
// samplesKind ranks an rtt --samples file, which is not a result.
const samplesKind = "rtt-samples"

var kindRank = map[string]float64{
	calibrate.Kind: 0, rtt.Kind: 1, samplesKind: 1.5, latency.Kind: 2, bufsweep.Kind: 3,
	throughput.Kind: 4, forwardbench.Kind: 4.2, conns.Kind: 4.5, peers.Kind: 5, tracebench.Kind: 6, tracebench.OverheadKind: 6,
}

func rankOf(kind string) float64 {
	if r, ok := kindRank[kind]; ok {
		return r
	}
	return 7
}

func (r *Report) build() *document {
	d := &document{title: r.Title}
	if d.title == "" {
		d.title = "ipcbench report"
	}
	if !r.Generated.IsZero() {
		d.subtitle = "Generated " + r.Generated.Format(time.RFC3339)
	}
	// The answers first, then the experiments they come from; what the
	// machine was and how the runs went, which a reader needs only to
	// trust or reproduce a figure, last.
	calIn := r.calibrationSource()
	var body []*section
	ids, titles := map[*Input]string{}, map[*Input]string{}
	for i, in := range r.Inputs {
		if in == calIn && in.Result.Kind == calibrate.Kind {
			continue // it is the calibration block
		}
		s := resultSection(i+1, in)
		ids[in], titles[in] = s.id, s.title
		body = append(body, s)
	}
	for i, s := range r.Samples {
		body = append(body, samplesSection(i+1, s))
	}
	sort.SliceStable(body, func(i, j int) bool { return body[i].rank < body[j].rank })
	d.sections = append(d.sections, r.answersSection(ids, titles))
	if len(r.Notes) > 0 {
		d.sections = append(d.sections, &section{id: "notes", title: "Notes", notes: r.Notes})
	}
	d.sections = append(d.sections, body...)
	if len(r.Runs) > 0 {
		d.sections = append(d.sections, runsSection(r.Runs))
	}
	d.sections = append(d.sections, calibrationSection(calIn))
	d.sections = append(d.sections, hostSection(r.Inputs))
	return d
}

// calibrationSource picks the calibrate result if there is one, else the
// first result that carries a calibration block.
func (r *Report) calibrationSource() *Input {
	for _, in := range r.Inputs {
		if in.Result.Kind == calibrate.Kind && in.Result.Calibration != nil {
			return in
		}
	}
	for _, in := range r.Inputs {
		if in.Result.Calibration != nil {
			return in
		}
	}
	return nil
}

func calibrationSection(in *Input) *section {
	s := &section{id: "calibration", title: "Calibration: this machine's floor"}
	if in == nil {
		s.notes = append(s.notes, "No result carries a calibration block; run `ipcbench calibrate --json FILE` and add it to the report.")
		return s
	}
	c := in.Result.Calibration
	s.meta = append(s.meta, kv{"from", in.Name})
	s.tables = append(s.tables, fromTitled(calibrate.CalibrationTables(c))...)
	if in.Result.Kind == calibrate.Kind {
		var rows []calibrate.Row
		if err := json.Unmarshal(in.Rows, &rows); err != nil {
			s.notes = append(s.notes, fmt.Sprintf("calibrate rows not decoded: %v", err))
		} else if len(rows) > 0 {
			s.tables = append(s.tables, calibrateTables(rows)...)
		}
		s.meta = append(s.meta, resultMeta(in)...)
	}
	s.notes = append(s.notes, c.Notes...)
	if in.Result.Kind == calibrate.Kind {
		for _, n := range in.Result.Notes {
			if !contains(c.Notes, n) {
				s.notes = append(s.notes, n)
			}
		}
	}
	return s
}

func hostSection(ins []*Input) *section {
	s := &section{id: "host", title: "Host"}
	if len(ins) == 0 {
		s.notes = append(s.notes, "No results were given.")
		return s
	}
	h := ins[0].Result.Host
	t := &bench.Table{Header: []string{"field", "value"}}
	t.Add("hostname", h.Hostname)
	t.Add("CPU model", h.ModelName)
	t.Add("CPUs", h.CPUs)
	t.Add("kernel", h.Kernel)
	t.Add("Go", h.GoVersion)
	t.Add("GOMAXPROCS", h.GOMAXPROCS)
	t.Add("net.unix.max_dgram_qlen", h.MaxDgramQlen)
	t.Add("net.core.rmem_max / rmem_default", fmt.Sprintf("%d / %d", h.RmemMax, h.RmemDefault))
	t.Add("fs.mqueue msg_max / msgsize_max / queues_max", fmt.Sprintf("%d / %d / %d", h.MqMsgMax, h.MqMsgsizeMax, h.MqQueuesMax))
	s.tables = append(s.tables, table{"host of " + ins[0].Name, t})
	for _, in := range ins[1:] {
		o := in.Result.Host
		if o.Hostname != h.Hostname || o.Kernel != h.Kernel || o.ModelName != h.ModelName || o.CPUs != h.CPUs {
			s.notes = append(s.notes, fmt.Sprintf("%s was measured on a different host: %s, %s, %d CPUs, kernel %s",
				in.Name, o.Hostname, o.ModelName, o.CPUs, o.Kernel))
		}
	}
	return s
}

func runsSection(runs []Run) *section {
	s := &section{id: "runs", title: "Runs"}
	t := &bench.Table{Header: []string{"subcommand", "outcome", "time", "result", "log"}}
	failed := 0
	for _, r := range runs {
		outcome := "ok"
		if r.Err != "" {
			outcome = "FAILED"
			failed++
			s.notes = append(s.notes, fmt.Sprintf("%s failed: %s", r.Name, r.Err))
		}
		t.Add(r.Name, outcome, r.Duration.Round(100*time.Millisecond).String(), orDash(r.Result), orDash(r.Log))
	}
	s.tables = append(s.tables, table{"subcommands run", t})
	if failed > 0 {
		s.notes = append(s.notes, fmt.Sprintf("%d of %d subcommands failed; the report shows the others.", failed, len(runs)))
	}
	return s
}

// resultMeta is the provenance of one result: command, times, parameters.
func resultMeta(in *Input) []kv {
	res := in.Result
	var m []kv
	if len(res.Command) > 0 {
		m = append(m, kv{"command", strings.Join(res.Command, " ")})
	}
	// Subcommands create the envelope when measuring is over, so Started
	// and Finished are nearly equal; show when, not how long.
	if t := res.Finished; !t.IsZero() {
		m = append(m, kv{"finished", t.UTC().Format(time.RFC3339)})
	} else if t := res.Started; !t.IsZero() {
		m = append(m, kv{"started", t.UTC().Format(time.RFC3339)})
	}
	if p := compactJSON(in.Params); p != "" && p != "null" {
		m = append(m, kv{"params", p})
	}
	return m
}

func resultSection(i int, in *Input) *section {
	kind := in.Result.Kind
	s := &section{id: fmt.Sprintf("r%d-%s", i, slug(kind)), title: kind + ": " + in.Name, rank: rankOf(kind)}
	s.meta = resultMeta(in)
	var err error
	switch kind {
	case calibrate.Kind:
		var rows []calibrate.Row
		if err = json.Unmarshal(in.Rows, &rows); err == nil {
			s.tables = append(s.tables, calibrateTables(rows)...)
		}
	case rtt.Kind:
		err = rttSection(s, in)
	case latency.Kind:
		err = latencySection(s, in)
	case bufsweep.Kind:
		err = bufsweepSection(s, in)
	case throughput.Kind:
		err = throughputSection(s, in)
	case forwardbench.Kind:
		err = forwardSection(s, in)
	case conns.Kind:
		err = connsSection(s, in)
	case peers.Kind:
		err = peersSection(s, in)
	case tracebench.Kind:
		err = traceSection(s, in)
	case tracebench.OverheadKind:
		err = overheadSection(s, in)
	default:
		s.notes = append(s.notes, fmt.Sprintf("kind %q is not one this ipcbench renders (written by an older or a newer version?): its notes and raw rows follow", kind))
		s.details = append(s.details, rawRows(in))
	}
	if err != nil {
		s.notes = append(s.notes, fmt.Sprintf("rows not decoded as %q: %v", kind, err))
		s.tables, s.plots, s.pres, s.details = nil, nil, nil, []pre{rawRows(in)}
	}
	if c := in.Result.Calibration; c != nil {
		s.meta = append(s.meta, kv{"calibration", fmt.Sprintf("getpid %.0f ns, sched_yield %.0f ns, cache-line round trip %.0f ns",
			c.GetpidNs, c.SchedYieldNs, c.CacheLineRTTNs)})
	}
	s.notes = append(s.notes, in.Result.Notes...)
	return s
}

// rawRows is a result's rows as written, for a section that cannot render
// them: collapsed, since a trace result's rows run to thousands of lines.
func rawRows(in *Input) pre {
	var b bytes.Buffer
	if err := json.Indent(&b, in.Rows, "", "  "); err != nil {
		return pre{"rows (raw JSON)", string(in.Rows)}
	}
	return pre{"rows (raw JSON)", b.String()}
}

func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func slug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}
