package rtt

import (
	"fmt"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
)

// Kind is the subcommand and the result kind of this experiment.
const Kind = "rtt"

// rtThrottleMark follows a maximum that RT throttling likely explains
// (Row.MaxLikelyRTThrottle; the result's notes say why).
const rtThrottleMark = " RT?"

// Tables is every table of an rtt result, for the terminal and the report.
// Rows with an Error are left out (their notes explain them).
func Tables(rows []Row) []bench.TitledTable {
	t := &bench.Table{Header: []string{"mechanism", "placement", "pin", "sched", "size", "n", "mean", "median",
		"median cycles", "min", "max", "stddev", "q95", "q99", "q99.9", "q99.99", "go/c", "ran on p>c",
		"cs p vol/inv", "cs c vol/inv"}}
	for _, r := range rows {
		if r.Error != "" {
			continue
		}
		s := r.Stats
		ratio := "-"
		if r.RatioToC > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToC)
		}
		cycles := "-"
		if r.TSCPerNs > 0 {
			cycles = fmt.Sprintf("%.0f", s.Median*r.TSCPerNs)
		}
		maxCell := bench.FormatNs(s.Max)
		if r.MaxLikelyRTThrottle {
			maxCell += rtThrottleMark
		}
		ranOn := fmt.Sprint(r.Parent.CPUStart)
		csChild := "-"
		if r.Child != nil {
			ranOn += fmt.Sprintf(">%d", r.Child.CPUStart)
			csChild = fmt.Sprintf("%d/%d", r.Child.VolCS, r.Child.InvolCS)
		}
		t.Add(r.Mechanism, placementCell(r), orDash(r.PinMode), orDash(r.Sched), bench.FormatSize(r.Size), s.N,
			bench.FormatNs(s.Mean), bench.FormatNs(s.Median), cycles, bench.FormatNs(s.Min), maxCell,
			bench.FormatNs(s.Stddev), bench.FormatNs(s.Q95), bench.FormatNs(s.Q99), bench.FormatNs(s.Q999),
			bench.FormatNs(s.Q9999), ratio, ranOn, fmt.Sprintf("%d/%d", r.Parent.VolCS, r.Parent.InvolCS), csChild)
	}
	return []bench.TitledTable{{Title: "round trip per mechanism and placement", Table: t}}
}

// placementCell is "same 0", "cross 0>1" or "unpinned": the placement and
// the CPUs the sides were pinned to (where they ran is in "ran on").
func placementCell(r Row) string {
	if r.Placement == "" {
		return "-" // a result written before rows carried their placement
	}
	cpus := make([]string, len(r.CPUs))
	for i, c := range r.CPUs {
		cpus[i] = fmt.Sprint(c)
	}
	if len(cpus) == 0 {
		return r.Placement
	}
	return r.Placement + " " + strings.Join(cpus, ">")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
