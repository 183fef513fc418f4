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
// microseconds, one way and round trip, then the measurement count and the
// time from the first measured message's scheduled send to the last
// received. A percentile the count cannot support (bench.Supported) is
// shown as bench.Unsupported. Rows with an error are skipped
// (Result.Notes explains them).
func WriteSeedTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	rule := strings.Repeat("-", 57)
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		fmt.Fprintf(&b, "%s\n%s %s, %s at %d/s\n", rule, r.Mode, r.Transport, bench.FormatSize(r.Size), r.Rate)
		fmt.Fprintf(&b, "%-22s | %13s | %14s |\n", "latency (microseconds)", "~ one way", "round trip")
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
			fmt.Fprintf(&b, "%-22s | %13s | %14s |\n", l.name, ow, cell(l, r.RoundTrip))
		}
		fmt.Fprintf(&b, "Based on %d measurements.", r.Measured)
		if r.Lost > 0 {
			fmt.Fprintf(&b, " %d of %d messages lost.", r.Lost, r.Sent)
		}
		fmt.Fprintf(&b, "\nIt took %d ms between the first measured message's scheduled send and the last received\n", r.ElapsedNs/1e6)
		fmt.Fprintf(&b, "(achieved %.0f msg/s, %d late sends (latest %s behind schedule), %d warm-up messages excluded)\n",
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

// Tables is the compact one-line-per-row summary: the observation count n,
// the losses and late sends, and the percentiles, measured once from the
// scheduled send time; a percentile n cannot support is bench.Unsupported
// (Notes explains it).
func Tables(rows []Row) []bench.TitledTable {
	t := &bench.Table{Header: []string{"mode", "transport", "size", "rate", "n", "lost", "late sends",
		"1w mean", "1w p50", "1w p99", "1w p99.9", "1w p99.99", "1w max", "rt mean", "rt p99", "rt p99.99", "rt max", "achieved/s"}}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		rtc := []any{"-", "-", "-", "-"}
		if d := r.RoundTrip; d != nil {
			rtc = []any{bench.FormatNs(d.Mean), bench.FormatPercentileNs(d.P99, d.Count, 99),
				bench.FormatPercentileNs(d.P9999, d.Count, 99.99), bench.FormatNs(d.Max)}
		}
		d := r.OneWay
		cells := []any{r.Mode, r.Transport, bench.FormatSize(r.Size), r.Rate, r.Measured, r.Lost, r.LateSends,
			bench.FormatNs(d.Mean), bench.FormatPercentileNs(d.P50, d.Count, 50), bench.FormatPercentileNs(d.P99, d.Count, 99),
			bench.FormatPercentileNs(d.P999, d.Count, 99.9), bench.FormatPercentileNs(d.P9999, d.Count, 99.99), bench.FormatNs(d.Max)}
		cells = append(cells, rtc...)
		cells = append(cells, fmt.Sprintf("%.0f", r.AchievedRate))
		t.Add(cells...)
	}
	return []bench.TitledTable{{Title: "percentiles from the scheduled send time, n observations each (one way, round trip)", Table: t}}
}

// Notes are what a reader of Tables and WriteSeedTable must know: the
// method, and what bench.Unsupported means when a row shows it.
func Notes(rows []Row) []string {
	notes := []string{"latency = receive time minus the message's scheduled send time (1/rate apart), each message recorded once, no coordinated-omission correction; a late send's delay is in its latency and late sends are counted"}
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
