package latency

import (
	"fmt"
	"io"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// SeedLine is one line of seed 002's table; pct is the percentile it
// shows (0 for the mean and the worst case, which every count supports).
type SeedLine struct {
	name string
	pct  float64
	f    func(d *Dist) float64
}

// SeedLines are the lines of seed 002's table, in its order.
var SeedLines = []SeedLine{
	{"mean", 0, func(d *Dist) float64 { return d.Mean }},
	{"50th percentile", 50, func(d *Dist) float64 { return d.P50 }},
	{"99th percentile", 99, func(d *Dist) float64 { return d.P99 }},
	{"99.9th percentile", 99.9, func(d *Dist) float64 { return d.P999 }},
	{"99.99th percentile", 99.99, func(d *Dist) float64 { return d.P9999 }},
	{"99.999th percentile", 99.999, func(d *Dist) float64 { return d.P99999 }},
	{"worst", 0, func(d *Dist) float64 { return d.Max }},
}

// Name is the line's label.
func (l SeedLine) Name() string { return l.name }

// Value is the line's figure of d in ns, and whether d's count supports it.
func (l SeedLine) Value(d *Dist) (float64, bool) {
	return l.f(d), l.pct == 0 || bench.Supported(d.Count, l.pct)
}

// WriteSeedTable prints each row as seed 002 prints a run: latency in
// microseconds, one way and round trip, with the sender's lateness beside
// them at the same percentiles, then the measurement count and the time
// from the first measured message's scheduled send to the last received.
// A percentile the count cannot support (bench.Supported) is shown as
// bench.Unsupported. Rows with an error are skipped (Result.Notes explains
// them).
func WriteSeedTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	rule := strings.Repeat("-", 74)
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		fmt.Fprintf(&b, "%s\n%s %s, %s at %d/s", rule, r.Mode, r.Transport, bench.FormatSize(r.Size), r.Rate)
		if r.Placement != "" {
			fmt.Fprintf(&b, ", placement %s (sender / echo / receiver on CPU %s)", r.Placement, r.Where())
		}
		fmt.Fprintf(&b, "\n%-22s | %13s | %14s | %14s |\n", "latency (microseconds)", "~ one way", "round trip", "sender late")
		cell := func(l SeedLine, d *Dist) string {
			if d == nil {
				return "-"
			}
			v, ok := l.Value(d)
			if !ok {
				return bench.Unsupported
			}
			return us(v)
		}
		unsupported := false
		for _, l := range SeedLines {
			ow := cell(l, &r.OneWay)
			unsupported = unsupported || ow == bench.Unsupported
			fmt.Fprintf(&b, "%-22s | %13s | %14s | %14s |\n", l.name, ow, cell(l, r.RoundTrip), cell(l, r.SendLag))
		}
		fmt.Fprintf(&b, "Based on %d measurements.", r.Measured)
		if r.Lost > 0 {
			fmt.Fprintf(&b, " %d of %d messages lost.", r.Lost, r.Sent)
		}
		fmt.Fprintf(&b, "\nIt took %d ms between the first measured message's scheduled send and the last received\n", r.ElapsedNs/1e6)
		fmt.Fprintf(&b, "(achieved %.0f msg/s, %d sends more than one interval late (latest %s behind schedule), %d warm-up messages excluded)\n",
			r.AchievedRate, r.LateSends, bench.FormatNs(float64(r.MaxSendLagNs)), r.Warmup)
		if unsupported {
			fmt.Fprintf(&b, "(%s)\n", bench.SupportNote(r.OneWay.Count, 50, 99, 99.9, 99.99, 99.999))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func us(ns float64) string { return fmt.Sprintf("%.0f", ns/1e3) }

// Table titles.
const (
	TitleLatency = "percentiles from the scheduled send time, n observations each, with the sender's own lateness beside them"
	TitleSender  = "the sender: rate kept, lateness, round trip from the actual send, CPU"
)

// Tables is every table of the experiment (ADR 0037): the latencies, one
// line per row, with where its threads ran and the sender's lateness
// beside them; and the sender's side of each row. A percentile n cannot
// support is bench.Unsupported (Notes explains it).
func Tables(rows []Row) []bench.TitledTable {
	t := &bench.Table{Header: []string{"mode", "transport", "size", "placement", "CPU s / e / r", "n", "lost",
		"send late p50", "send late p99", "1w mean", "1w p50", "1w p99", "1w p99.9", "1w p99.99", "1w max",
		"rt p50", "rt p99", "rt p99.99", "rt max"}}
	st := &bench.Table{Header: []string{"mode", "transport", "size", "placement", "rate", "achieved/s", "late sends",
		"send late p50", "send late p99", "send late p99.9", "send late max", "rt p50 from send", "rt p99 from send", "sender CPU/msg", "of it spinning"}}
	rate := 0
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		rate = r.Rate
		pl := orDash(r.Placement)
		d := r.OneWay
		cells := []any{r.Mode, r.Transport, bench.FormatSize(r.Size), pl, r.Where(), r.Measured, r.Lost,
			pct(r.SendLag, 50), pct(r.SendLag, 99),
			bench.FormatNs(d.Mean), pct(&d, 50), pct(&d, 99), pct(&d, 99.9), pct(&d, 99.99), bench.FormatNs(d.Max),
			pct(r.RoundTrip, 50), pct(r.RoundTrip, 99), pct(r.RoundTrip, 99.99), worst(r.RoundTrip)}
		t.Add(cells...)
		cpu, spin := "-", "-"
		if n := r.Warmup + r.Sent; n > 0 && r.SenderCPUNs > 0 {
			cpu = bench.FormatNs(float64(r.SenderCPUNs) / float64(n))
			spin = fmt.Sprintf("%.0f%%", 100*float64(r.PacingCPUNs)/float64(r.SenderCPUNs))
		}
		st.Add(r.Mode, r.Transport, bench.FormatSize(r.Size), pl, r.Rate, fmt.Sprintf("%.0f", r.AchievedRate), r.LateSends,
			pct(r.SendLag, 50), pct(r.SendLag, 99), pct(r.SendLag, 99.9), worst(r.SendLag),
			pct(r.RoundTripFromSend, 50), pct(r.RoundTripFromSend, 99), cpu, spin)
	}
	title := TitleLatency
	if rate > 0 {
		title = fmt.Sprintf("%s (%d/s)", title, rate)
	}
	return []bench.TitledTable{{Title: title, Table: t}, {Title: TitleSender, Table: st}}
}

// pct is d's percentile p (50, 99, 99.9, 99.99), "-" without d, and
// bench.Unsupported where d's count cannot support it.
func pct(d *Dist, p float64) string {
	if d == nil {
		return "-"
	}
	var v float64
	switch p {
	case 50:
		v = d.P50
	case 99:
		v = d.P99
	case 99.9:
		v = d.P999
	case 99.99:
		v = d.P9999
	case 99.999:
		v = d.P99999
	}
	return bench.FormatPercentileNs(v, d.Count, p)
}

func worst(d *Dist) string {
	if d == nil {
		return "-"
	}
	return bench.FormatNs(d.Max)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Notes are what a reader of Tables and WriteSeedTable must know: the
// method, what the sender's lateness is, the placements, and what
// bench.Unsupported means when a row shows it.
func Notes(rows []Row) []string {
	notes := []string{
		"latency = receive time minus the message's scheduled send time (1/rate apart), each message recorded once, no coordinated-omission correction; a late send's delay is in its latency",
		"send late = the time the sender actually sent minus the scheduled time: the instrument's share of every latency; where it is not small against the latencies, the sender, not the transport, made them",
		"placement: same = sender, echo and receiver threads pinned to one CPU; cross = the sender alone on one CPU, the echo and the receiver on a second (the message crosses CPUs, the reply does not); unpinned = where the scheduler put them; CPU s / e / r = where the sender, the echo (or the aggregator) and the receiver were seen running (sampled every 16th message)",
		"rt from send = round trip measured from the actual send (what sockperf reports, halved); late sends = sends more than one interval late",
	}
	minN := int64(-1)
	for _, r := range rows {
		if r.Error == "" && (minN < 0 || r.OneWay.Count < minN) {
			minN = r.OneWay.Count
		}
	}
	if minN >= 0 && !bench.Supported(minN, 99.999) {
		notes = append(notes, bench.SupportNote(minN, 50, 99, 99.9, 99.99, 99.999))
	}
	return notes
}
