package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
)

func init() {
	register(&command{name: "calibrate", summary: "cost of clock reads, getpid, sched_yield, TSC rate, cache-line round trip", run: runCalibrate})
}

func runCalibrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "none", "0") // --transport/--size are accepted for uniformity and ignored
	noC := fs.Bool("no-cref", false, "skip the C helper (TSC rate, rdtscp, C clock_gettime)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	rep, err := calibrate.Run(ctx, calibrate.Options{Quick: c.Quick, CRef: !*noC})
	if err != nil {
		return err
	}
	res := bench.NewResult("calibrate", map[string]any{"quick": c.Quick, "c_reference": !*noC})
	res.Calibration, res.Rows, res.Notes = &rep.Calibration, rep.Rows, rep.Calibration.Notes
	return finish(&c, res, CalibrateTable(rep.Rows))
}

// CalibrateTable renders calibrate rows.
func CalibrateTable(rows []calibrate.Row) *bench.Table {
	t := &bench.Table{Header: []string{"operation", "median", "min", "max", "unit", "how"}}
	for _, r := range rows {
		t.Add(r.Name, fmt.Sprintf("%.2f", r.Median), fmt.Sprintf("%.2f", r.Min), fmt.Sprintf("%.2f", r.Max), r.Unit, r.Source)
	}
	return t
}
