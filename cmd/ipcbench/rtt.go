package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/calibrate"
	"github.com/ipclab/logagg/internal/bench/rtt"
)

func init() {
	register(&command{name: rtt.Kind, summary: "ping-pong round trip per IPC mechanism, same-core and cross-core, with C reference rows", run: runRTT})
}

func runRTT(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(rtt.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, strings.Join(rtt.AllMechanisms, ","), "100")
	var o rtt.Options
	bench.CountVar(fs, &o.Iterations, "iterations", 100000, "`N` timed round trips per row (seed 004 used 1000000)")
	bench.CountVar(fs, &o.Warmup, "warmup", 0, "`N` untimed round trips before timing (default iterations/10, at most 10000)")
	placements := fs.String("placement", rtt.PlaceSame+","+rtt.PlaceCross,
		"comma-separated placements to measure every mechanism in: same (both sides pinned to one CPU), cross (two CPUs), unpinned")
	fs.StringVar(&o.Sched, "sched", rtt.SchedOther, fmt.Sprintf("scheduling class of both sides: other, or fifo (SCHED_FIFO priority %d; a refusal is reported and the run continues)", rtt.FIFOPriority))
	fs.BoolVar(&o.GoSyscalls, "go-syscalls", false, "Go sides use runtime-aware syscalls (unix.Read/Write) instead of raw ones, to show their cost")
	samples := fs.String("samples", "", "write every sample as CSV (mechanism@placement,size,iteration,ns) to `FILE`")
	noC := fs.Bool("no-cref", false, "skip the C reference rows (c:pipe, c:unixsock)")
	noCal := fs.Bool("no-calibrate", false, "do not attach a calibration block to the result")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if c.Quick && !explicit["iterations"] {
		o.Iterations = 2000
	}
	o.Mechanisms, o.Sizes, o.CRef = c.Transports, c.Sizes, !*noC
	o.Placements = strings.Split(*placements, ",")
	if err := o.Validate(); err != nil {
		return err
	}
	if *samples != "" {
		f, err := os.Create(*samples)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Samples = f
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(o.Iterations*len(o.Mechanisms)*len(o.Sizes)*len(o.Placements)), c.ProgressEnabled())
	out, err := rtt.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	res := bench.NewResult(rtt.Kind, out.Params)
	res.Rows, res.Notes = out.Rows, out.Notes
	if !*noCal {
		if cal, err := calibrate.Quick(); err != nil {
			res.Notes = append(res.Notes, "calibration failed: "+err.Error())
		} else {
			res.Calibration = &cal
		}
	}
	if f, ok := o.Samples.(*os.File); ok {
		if err := f.Close(); err != nil {
			return fmt.Errorf("samples: %w", err)
		}
	}
	return emit(&c, res, rtt.Tables(out.Rows))
}
