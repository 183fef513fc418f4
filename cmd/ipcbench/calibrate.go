package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
)

func init() {
	register(&command{name: calibrate.Kind, summary: "machine checks (TSC, governor, SMT, clocksource); cost of clock reads, getpid, sched_yield, rdtscp, cache-line round trip", run: runCalibrate})
}

func runCalibrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(calibrate.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "none", "0") // --transport/--size are accepted for uniformity and ignored
	noC := fs.Bool("no-cref", false, "skip the C helper (TSC rate, rdtscp, C clock_gettime)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	out, err := calibrate.Run(ctx, calibrate.Options{Quick: c.Quick, CRef: !*noC})
	if err != nil {
		return err
	}
	res := bench.NewResult(calibrate.Kind, out.Params)
	res.Calibration, res.Rows, res.Notes = &out.Calibration, out.Rows, out.Notes
	// The calibration block (figures and machine checks), then the
	// measurements.
	return emit(&c, res, append(calibrate.CalibrationTables(&out.Calibration), calibrate.Tables(out.Rows)...))
}
