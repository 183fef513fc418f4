package latency

import (
	"fmt"
	"io"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// WriteSeedTable prints each row as seed 002 prints a run: latency in
// microseconds, one way and round trip, then the measurement count and the
// time from the first measured message sent to the last received. Rows
// with an error are skipped (Report.Notes explains them).
func WriteSeedTable(w io.Writer, rows []Row) error {
	var b strings.Builder
	rule := strings.Repeat("-", 57)
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		fmt.Fprintf(&b, "%s\n%s %s, %s at %d/s\n", rule, r.Mode, r.Transport, bench.FormatSize(r.Size), r.Rate)
		fmt.Fprintf(&b, "%-22s | %13s | %14s |\n", "latency (microseconds)", "~ one way", "round trip")
		rt := func(f func(d *Dist) float64) string {
			if r.RoundTrip == nil {
				return "-"
			}
			return us(f(r.RoundTrip))
		}
		for _, line := range []struct {
			name string
			f    func(d *Dist) float64
		}{
			{"mean", func(d *Dist) float64 { return d.Mean }},
			{"50th percentile", func(d *Dist) float64 { return d.P50 }},
			{"99th percentile", func(d *Dist) float64 { return d.P99 }},
			{"99.9th percentile", func(d *Dist) float64 { return d.P999 }},
			{"99.99th percentile", func(d *Dist) float64 { return d.P9999 }},
			{"99.999th percentile", func(d *Dist) float64 { return d.P99999 }},
			{"worst", func(d *Dist) float64 { return d.Max }},
		} {
			fmt.Fprintf(&b, "%-22s | %13s | %14s |\n", line.name, us(line.f(&r.OneWay)), rt(line.f))
		}
		fmt.Fprintf(&b, "Based on %d measurements.", r.Measured)
		if r.Lost > 0 {
			fmt.Fprintf(&b, " %d of %d messages lost.", r.Lost, r.Sent)
		}
		fmt.Fprintf(&b, "\nIt took %d ms between the first measured message sent and the last received\n", r.ElapsedNs/1e6)
		fmt.Fprintf(&b, "(achieved %.0f msg/s, %d late sends, %d warm-up messages excluded)\n\n", r.AchievedRate, r.LateSends, r.Warmup)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func us(ns float64) string { return fmt.Sprintf("%.0f", ns/1e3) }

// Table is the compact one-line-per-row summary (µs, corrected percentiles).
func Table(rows []Row) *bench.Table {
	t := &bench.Table{Header: []string{"mode", "transport", "size", "rate", "n", "lost",
		"1w mean", "1w p50", "1w p99", "1w p99.99", "1w max", "rt mean", "rt p99", "rt p99.99", "rt max", "achieved/s"}}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		rtc := []any{"-", "-", "-", "-"}
		if r.RoundTrip != nil {
			d := r.RoundTrip
			rtc = []any{bench.FormatNs(d.Mean), bench.FormatNs(d.P99), bench.FormatNs(d.P9999), bench.FormatNs(d.Max)}
		}
		d := r.OneWay
		cells := []any{r.Mode, r.Transport, bench.FormatSize(r.Size), r.Rate, r.Measured, r.Lost,
			bench.FormatNs(d.Mean), bench.FormatNs(d.P50), bench.FormatNs(d.P99), bench.FormatNs(d.P9999), bench.FormatNs(d.Max)}
		cells = append(cells, rtc...)
		cells = append(cells, fmt.Sprintf("%.0f", r.AchievedRate))
		t.Add(cells...)
	}
	return t
}
