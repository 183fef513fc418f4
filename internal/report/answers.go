package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/bufsweep"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/rtt"
	"github.com/ipclab/logagg/internal/bench/tracebench"
)

// AnswersID is the id of the section that opens every report: one short
// answer to each question the lab exists for, each linking to the section
// it comes from.
const AnswersID = "answers"

// answer is one question and what the report's results say to it. link
// is the id of the section the answer comes from ("" when no result
// answers it); linkText names it.
type answer struct {
	question, text string
	link, linkText string
}

// question is one question the lab answers, from results of kind.
type question struct {
	text, kind, command string
	answer              func(in *Input) (string, error)
}

// questions are the lab's questions, in the order the answers section
// asks them.
var questions = []question{
	{"Which mechanism is fastest, and by how much?", rtt.Kind, "ipcbench rtt", rttAnswer},
	{"What latency at a fixed rate?", latency.Kind, "ipcbench latency", latencyAnswer},
	{"What does tracing cost?", tracebench.OverheadKind, "ipcbench trace --overhead", overheadAnswer},
	{"What does buffering buy?", bufsweep.Kind, "ipcbench bufsweep", bufsweepAnswer},
	{"How do we compare with the peer daemons?", peers.Kind, "ipcbench peers", peersAnswer},
}

// answersSection answers every question from the first result of its
// kind; ids maps each input to its section's id.
func (r *Report) answersSection(ids map[*Input]string, titles map[*Input]string) *section {
	s := &section{id: AnswersID, title: "Answers"}
	for _, q := range questions {
		a := answer{question: q.text}
		var in *Input
		for _, c := range r.Inputs {
			if c.Result.Kind == q.kind {
				in = c
				break
			}
		}
		switch {
		case in != nil:
			text, err := q.answer(in)
			if err != nil {
				text = "its result could not be read: " + err.Error()
			}
			a.text, a.link, a.linkText = text, ids[in], titles[in]
		case r.failed(q.kind) != "":
			a.text = fmt.Sprintf("not measured: `%s` failed (%s).", q.command, r.failed(q.kind))
			a.link, a.linkText = "runs", "Runs"
		default:
			a.text = fmt.Sprintf("not measured in this report: run `%s --json FILE` and add it.", q.command)
		}
		s.answers = append(s.answers, a)
	}
	return s
}

// failed is the error of the run that should have written a result of
// kind, "" if none failed.
func (r *Report) failed(kind string) string {
	for _, run := range r.Runs {
		if run.Err != "" && (run.Name == kind || kind == tracebench.OverheadKind && run.Name == "trace-overhead") {
			return run.Err
		}
	}
	return ""
}

// placeWords names an rtt or latency placement in an answer.
func placeWords(p string) string {
	switch p {
	case rtt.PlaceSame:
		return "same core"
	case rtt.PlaceCross:
		return "across cores"
	case rtt.PlaceUnpinned, "":
		return "unpinned"
	}
	return p
}

func capital(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	if r := a / b; r < 10 {
		return fmt.Sprintf("%.1f×", r)
	} else {
		return fmt.Sprintf("%.0f×", r)
	}
}

// rttAnswer: per placement, the fastest mechanism that hands a message
// between two sides, the runner-up and the slowest, by median round trip.
func rttAnswer(in *Input) (string, error) {
	var rows []rtt.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return "", err
	}
	byPlace := map[string][]rtt.Row{}
	var order []string
	size := -1
	for _, r := range rows {
		// One thread playing both sides is no hand-off; C rows are the
		// reference for the Go rows, not mechanisms of their own.
		if r.Error != "" || r.Impl == "c" || r.Mechanism == rtt.MechPipeInproc || r.Mechanism == rtt.MechShmSerial || r.Stats.Median <= 0 {
			continue
		}
		if size < 0 {
			size = r.Size
		}
		if r.Size != size {
			continue
		}
		if _, ok := byPlace[r.Placement]; !ok {
			order = append(order, r.Placement)
		}
		byPlace[r.Placement] = append(byPlace[r.Placement], r)
	}
	if len(order) == 0 {
		return "no mechanism was measured.", nil
	}
	var parts []string
	for _, p := range order {
		rs := byPlace[p]
		slices.SortStableFunc(rs, func(a, b rtt.Row) int { return cmpF(a.Stats.Median, b.Stats.Median) })
		f := rs[0]
		text := fmt.Sprintf("%s: %s, %s", capital(placeWords(p)), f.Mechanism, bench.FormatNs(f.Stats.Median))
		if len(rs) > 1 {
			n := rs[1]
			text += fmt.Sprintf(", %s ahead of %s (%s)", ratio(n.Stats.Median, f.Stats.Median), n.Mechanism, bench.FormatNs(n.Stats.Median))
		}
		if len(rs) > 2 {
			l := rs[len(rs)-1]
			text += fmt.Sprintf("; slowest %s, %s (%s)", l.Mechanism, bench.FormatNs(l.Stats.Median), ratio(l.Stats.Median, f.Stats.Median))
		}
		parts = append(parts, text)
	}
	return fmt.Sprintf("Median round trip of %s messages. %s.", sizeWords(size), strings.Join(parts, ". ")), nil
}

// latencyAnswer: per placement, the range of one-way p50 and p99 over
// the raw transports, the aggregator path's, and how late the sender was.
func latencyAnswer(in *Input) (string, error) {
	var rows []latency.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return "", err
	}
	type group struct {
		name     string
		rows     []latency.Row
		lateP50  float64
		lateP99  float64
		unknownL bool
	}
	var groups []*group
	find := func(name string) *group {
		for _, g := range groups {
			if g.name == name {
				return g
			}
		}
		g := &group{name: name}
		groups = append(groups, g)
		return g
	}
	rate, size := 0, 0
	for _, r := range rows {
		if r.Error != "" || r.Measured == 0 {
			continue
		}
		rate, size = r.Rate, r.Size
		name := "through the aggregator to the file"
		if r.Mode == latency.ModeRaw {
			name = "raw " + placeWords(r.Placement)
		}
		g := find(name)
		g.rows = append(g.rows, r)
		if r.SendLag == nil {
			g.unknownL = true
		} else {
			g.lateP50, g.lateP99 = max(g.lateP50, r.SendLag.P50), max(g.lateP99, r.SendLag.P99)
		}
	}
	if len(groups) == 0 {
		return "no row was measured.", nil
	}
	var parts []string
	instrument := false
	for _, g := range groups {
		lo, hi := rangeOf(g.rows, func(r latency.Row) float64 { return r.OneWay.P50 })
		lo99, hi99 := rangeOf(g.rows, func(r latency.Row) float64 { return r.OneWay.P99 })
		best := slices.MinFunc(g.rows, func(a, b latency.Row) int { return cmpF(a.OneWay.P50, b.OneWay.P50) })
		text := fmt.Sprintf("%s p50 %s, p99 %s", g.name, span(lo, hi), span(lo99, hi99))
		if len(g.rows) > 1 {
			text += fmt.Sprintf(" (%s fastest)", best.Transport)
		}
		switch {
		case g.unknownL:
			text += ", sender's lateness not recorded"
		default:
			text += fmt.Sprintf(", sender late at most %s at p99", bench.FormatNs(g.lateP99))
			if g.lateP50 > 0.25*lo {
				instrument = true
			}
		}
		parts = append(parts, text)
	}
	head := fmt.Sprintf("One way from the scheduled send, %d/s of %s: ", rate, sizeWords(size))
	out := head + strings.Join(parts, "; ") + "."
	if instrument {
		out += " The sender's own lateness is not small against these latencies: there, the instrument, not the transport, made them."
	}
	return out, nil
}

func rangeOf[T any](rows []T, f func(T) float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, r := range rows {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	return lo, hi
}

func span(lo, hi float64) string {
	if bench.FormatNs(lo) == bench.FormatNs(hi) {
		return bench.FormatNs(lo)
	}
	return bench.FormatNs(lo) + "–" + bench.FormatNs(hi)
}

// overheadAnswer: each tracer state's one-way mean over the untraced
// runs', whether it lies beyond their spread, and the CPU per message it
// adds.
func overheadAnswer(in *Input) (string, error) {
	var rows []tracebench.OverheadRow
	if err := decodeRows(in.Rows, &rows); err != nil {
		return "", err
	}
	states := tracebench.SummarizeOverhead(rows)
	var base *tracebench.OverheadState
	for _, st := range states {
		if st.State == tracebench.TracerNone && len(st.Rows) > 0 {
			base = st
		}
	}
	if base == nil {
		return "no run without a tracer to compare with.", nil
	}
	bm := base.Figure("1w mean").Median
	var parts []string
	for _, st := range states {
		if st == base || len(st.Rows) == 0 {
			continue
		}
		m := st.Figure("1w mean")
		text := fmt.Sprintf("%s %s", st.State, ratio(m.Median, bm))
		if m.Min <= base.Figure("1w mean").Max {
			text += " (within the untraced runs' spread)"
		}
		if d := st.Figure("workload CPU/msg").Median - base.Figure("workload CPU/msg").Median; d != 0 && base.Figure("workload CPU/msg").Median > 0 {
			sign := "+"
			if d < 0 {
				sign, d = "−", -d
			}
			text += fmt.Sprintf(", %s%s CPU/message", sign, bench.FormatNs(d))
		}
		parts = append(parts, text)
	}
	l := base.Rows[0].Latency
	return fmt.Sprintf("One-way mean latency with the tracer over without (%s, %s at %d/s, %s without a tracer): %s.",
		l.Transport, sizeWords(l.Size), l.Rate, bench.FormatNs(bm), strings.Join(parts, "; ")), nil
}

// bufsweepAnswer: per transport without faults, the smallest buffer's
// MB/s against the largest's, and the smallest buffer that reaches 90 %
// of the best.
func bufsweepAnswer(in *Input) (string, error) {
	var rows []bufsweep.Row
	if err := decodeRows(in.Rows, &rows); err != nil {
		return "", err
	}
	by := map[string][]bufsweep.Row{}
	var order []string
	for _, r := range rows {
		if r.Error != "" || r.Fault != "none" || r.MBps <= 0 {
			continue
		}
		if _, ok := by[r.Transport]; !ok {
			order = append(order, r.Transport)
		}
		by[r.Transport] = append(by[r.Transport], r)
	}
	if len(order) == 0 {
		return "no fault-free row was measured.", nil
	}
	var parts []string
	for _, t := range order {
		rs := by[t]
		slices.SortStableFunc(rs, func(a, b bufsweep.Row) int { return a.Buffer - b.Buffer })
		lo, hi := rs[0], rs[len(rs)-1]
		best := slices.MaxFunc(rs, func(a, b bufsweep.Row) int { return cmpF(a.MBps, b.MBps) })
		knee := best
		for _, r := range rs {
			if r.MBps >= 0.9*best.MBps {
				knee = r
				break
			}
		}
		parts = append(parts, fmt.Sprintf("%s %s MB/s with %s writes, %s MB/s with %s (%s); 90 %% of the best from %s",
			t, mbps(lo.MBps), sizeWords(lo.Buffer), mbps(hi.MBps), sizeWords(hi.Buffer), ratio(hi.MBps, lo.MBps), sizeWords(knee.Buffer)))
	}
	return "Moving a fixed volume, no faults: " + strings.Join(parts, "; ") + ".", nil
}

func mbps(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// peersAnswer: for each peer, in how many cells we are ahead by
// records/s, and the range of our records/s over theirs.
func peersAnswer(in *Input) (string, error) {
	var cells []peers.Row
	if err := decodeRows(in.Rows, &cells); err != nil {
		return "", err
	}
	type tally struct {
		ahead, n int
		lo, hi   float64
	}
	t := map[string]*tally{}
	var order []string
	null := peers.NullReader{}.Name()
	for _, c := range cells {
		var ours float64
		for _, r := range c.Daemons {
			if r.Daemon == peers.Ours {
				ours = r.RecordsPerS
			}
		}
		if ours <= 0 {
			continue
		}
		for _, r := range c.Daemons {
			if r.Daemon == peers.Ours || r.Daemon == null || r.RecordsPerS <= 0 {
				continue
			}
			x := t[r.Daemon]
			if x == nil {
				x = &tally{lo: math.Inf(1), hi: math.Inf(-1)}
				t[r.Daemon] = x
				order = append(order, r.Daemon)
			}
			q := ours / r.RecordsPerS
			x.n++
			if q > 1 {
				x.ahead++
			}
			x.lo, x.hi = min(x.lo, q), max(x.hi, q)
		}
	}
	if len(order) == 0 {
		return "no peer daemon was measured beside ours.", nil
	}
	var parts []string
	for _, d := range order {
		x := t[d]
		parts = append(parts, fmt.Sprintf("ahead of %s in %d of %d cells (%.2f–%.2f× its records/s)", d, x.ahead, x.n, x.lo, x.hi))
	}
	return "Same producer, records/s: " + strings.Join(parts, "; ") + ".", nil
}

// sizeWords is a size with its unit: "100 B", "4 KiB".
func sizeWords(n int) string {
	s := bench.FormatSize(n)
	if strings.HasSuffix(s, "iB") {
		return s[:len(s)-3] + " " + s[len(s)-3:]
	}
	return s + " B"
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
