package calibrate

import (
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
)

// Tables is calibrate's measurement table, for the terminal and the
// report alike. The cycles columns exist only when some row knows the TSC
// rate; the spread columns name what they are (batch means, not single
// operations).
func Tables(rows []Row) []bench.TitledTable {
	withCycles := false
	for _, r := range rows {
		withCycles = withCycles || r.TSCPerNs > 0
	}
	header := []string{"operation", "median ns"}
	if withCycles {
		header = append(header, "median cycles")
	}
	header = append(header, "fastest batch mean ns", "slowest batch mean ns")
	if withCycles {
		header = append(header, "batch means, cycles")
	}
	t := &bench.Table{Header: append(header, "batches x ops", "how")}
	for _, r := range rows {
		cells := []any{r.Name, fmt.Sprintf("%.2f", r.MedianNs)}
		if withCycles {
			cells = append(cells, cycles(r.MedianNs, r.TSCPerNs))
		}
		spread := r.Batches > 1
		cells = append(cells, orDash(spread, "%.2f", r.FastestBatchNs), orDash(spread, "%.2f", r.SlowestBatchNs))
		if withCycles {
			cells = append(cells, orDash(spread && r.TSCPerNs > 0, "%s", cycles(r.FastestBatchNs, r.TSCPerNs)+"-"+cycles(r.SlowestBatchNs, r.TSCPerNs)))
		}
		// Results saved before batches were recorded have none.
		cells = append(cells, orDash(r.Batches > 0, "%s", fmt.Sprintf("%d x %d", r.Batches, r.OpsPerBatch)), r.Source)
		t.Add(cells...)
	}
	title := "per operation: median, fastest and slowest of the per-batch means (a batch's figure is its mean time per operation)"
	if withCycles {
		title += "; cycles are TSC ticks (ns x TSC rate)"
	}
	return []bench.TitledTable{{Title: title, Table: t}}
}

// CalibrationTables renders the calibration block every result carries:
// the headline figures (with cycles where the TSC rate is known) and the
// machine checks. The terminal and the report both print these.
func CalibrationTables(c *bench.Calibration) []bench.TitledTable {
	figures := &bench.Table{Header: []string{"figure", "ns", "cycles"}}
	add := func(name string, ns float64) {
		if ns == 0 {
			figures.Add(name, "not measured", "-")
			return
		}
		figures.Add(name, fmt.Sprintf("%.1f", ns), orDash(c.TSCPerNs > 0, "%s", cycles(ns, c.TSCPerNs)))
	}
	add("time.Now (Go, vDSO)", c.TimeNowNs)
	add("monotonic clock read (Go)", c.MonoNs)
	add("clock_gettime (C)", c.ClockGettimeCNs)
	add("getpid (cheap syscall)", c.GetpidNs)
	add("sched_yield", c.SchedYieldNs)
	add("rdtscp", c.RdtscpNs)
	cacheLine := "cache-line round trip"
	if len(c.CacheLineCPUs) > 0 {
		cacheLine += fmt.Sprintf(" (CPUs %s)", cpuList(c.CacheLineCPUs))
	}
	add(cacheLine, c.CacheLineRTTNs)
	tsc := "not measured"
	if c.TSCPerNs > 0 {
		tsc = fmt.Sprintf("%.3f ticks/ns", c.TSCPerNs)
	}
	figures.Add("TSC rate", tsc, "-")
	out := []bench.TitledTable{{Title: "calibration block (medians of per-batch means)", Table: figures}}
	if len(c.Checks) == 0 {
		return out // a result saved before the checks existed
	}
	checks := &bench.Table{Header: []string{"check", "value", "verdict", "why it matters"}}
	warns := 0
	for _, k := range c.Checks {
		checks.Add(k.Name, k.Value, k.Verdict, k.Why)
		if k.Verdict != bench.VerdictOK {
			warns++
		}
	}
	return append(out, bench.TitledTable{Title: fmt.Sprintf("machine checks (%d of %d warn)", warns, len(c.Checks)), Table: checks})
}

func cycles(ns, perNs float64) string {
	if perNs <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", ns*perNs)
}

// orDash formats v, or "-" where the figure does not exist.
func orDash(ok bool, format string, v any) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}
