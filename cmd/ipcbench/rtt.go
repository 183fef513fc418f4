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
	register(&command{name: "rtt", summary: "ping-pong round trip per IPC mechanism, with C reference rows", run: runRTT})
}

func runRTT(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("rtt", flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, strings.Join(rtt.AllMechanisms, ","), "100")
	var o rtt.Options
	fs.IntVar(&o.Iterations, "iterations", 100000, "timed round trips per row (seed 004 used 1000000)")
	fs.IntVar(&o.Warmup, "warmup", 0, "untimed round trips before timing (default iterations/10, at most 10000)")
	fs.StringVar(&o.Pin, "pin", rtt.PinNone, "same|cross|none: both sides on one CPU, on two CPUs, or unpinned")
	fs.BoolVar(&o.SchedFIFO, "sched-fifo", false, "try SCHED_FIFO (priority 10) on both sides; a refusal is reported and the run continues")
	fs.BoolVar(&o.GoSyscalls, "go-syscalls", false, "Go sides use runtime-aware syscalls (unix.Read/Write) instead of raw ones, to show their cost")
	samples := fs.String("samples", "", "write every sample as CSV (mechanism,size,iteration,ns) to `FILE`")
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
	if *samples != "" {
		f, err := os.Create(*samples)
		if err != nil {
			return err
		}
		defer f.Close()
		o.Samples = f
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(o.Iterations*len(o.Mechanisms)*len(o.Sizes)), c.ProgressEnabled())
	rep, err := rtt.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	res := bench.NewResult("rtt", rep.Params)
	res.Rows, res.Notes = rep.Rows, rep.Notes
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
	return finish(&c, res, RTTTable(rep.Rows))
}

// RTTTable renders rtt rows; `report` can reuse it on rows read back.
func RTTTable(rows []rtt.Row) *bench.Table {
	t := &bench.Table{Header: []string{"mechanism", "size", "n", "mean", "median", "min", "max", "stddev",
		"q95", "q99", "q99.9", "q99.99", "go/c", "cpu p>c", "cs p vol/inv", "cs c vol/inv"}}
	for _, r := range rows {
		if r.Error != "" {
			continue // explained in the notes; an error cell would wreck the column widths
		}
		s := r.Stats
		ratio := "-"
		if r.RatioToC > 0 {
			ratio = fmt.Sprintf("%.2fx", r.RatioToC)
		}
		cpu := fmt.Sprint(r.Parent.CPUStart)
		csC := "-"
		if r.Child != nil {
			cpu += fmt.Sprintf(">%d", r.Child.CPUStart)
			csC = fmt.Sprintf("%d/%d", r.Child.VolCS, r.Child.InvolCS)
		}
		t.Add(r.Mechanism, bench.FormatSize(r.Size), s.N, bench.FormatNs(s.Mean), bench.FormatNs(s.Median),
			bench.FormatNs(s.Min), bench.FormatNs(s.Max), bench.FormatNs(s.Stddev), bench.FormatNs(s.Q95),
			bench.FormatNs(s.Q99), bench.FormatNs(s.Q999), bench.FormatNs(s.Q9999), ratio, cpu,
			fmt.Sprintf("%d/%d", r.Parent.VolCS, r.Parent.InvolCS), csC)
	}
	return t
}
