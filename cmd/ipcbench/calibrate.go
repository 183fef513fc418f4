package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

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
	res := bench.NewResult(calibrate.Kind, map[string]any{"quick": c.Quick, "c_reference": !*noC})
	res.Calibration, res.Rows, res.Notes = &out.Calibration, out.Rows, out.Notes
	// The calibration block (figures and machine checks), then the
	// measurements; finish prints the last table with the notes.
	w := io.Writer(os.Stdout)
	if c.JSONPath == "-" {
		w = os.Stderr
	}
	tables := append(calibrate.CalibrationTables(&out.Calibration), calibrate.Tables(out.Rows)...)
	last := tables[len(tables)-1]
	for _, t := range tables[:len(tables)-1] {
		if err := printTitled(w, t); err != nil {
			return err
		}
	}
	if _, err := fmt.Fprintln(w, last.Title); err != nil {
		return err
	}
	return finish(&c, res, last.Table)
}

// printTitled writes one table under its title, with a blank line after.
func printTitled(w io.Writer, t bench.TitledTable) error {
	if _, err := fmt.Fprintln(w, t.Title); err != nil {
		return err
	}
	if _, err := t.Table.WriteTo(w); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}
