package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ipclab/logagg/bpftrace"
	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/tracebench"
	"github.com/ipclab/logagg/internal/trace"
)

func init() {
	register(&command{name: tracebench.Kind, summary: "bpftrace scripts on a live aggregator + producers: syscalls per record by transport (default), --script NAME, tracing overhead (--overhead)", run: runTrace})
}

const traceUsage = `usage:
  ipcbench trace [--compare] [--transport LIST] [--count N] [--rate N]     syscalls per record, producer and aggregator (the default)
  ipcbench trace --script NAME --transport LIST [--target aggregator|producer|all] [--size N] [--count N] [--rate N] [--producers N]
  ipcbench trace --overhead [--transport tcp] [--size 4096] [--rate 20000] [--duration 5s] [--warmup 1s] [--tracers none,idle,log] [--placements shared,other] [--runs 3] [--log FILE] [--quick]
  ipcbench trace --list

Needs root (bpftrace) and the aggregator and producer binaries next to ipcbench.
`

func runTrace(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(tracebench.Kind, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), traceUsage); fs.PrintDefaults() }
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp,fifo", "100")
	script := fs.String("script", "", "shipped script name (see --list) or a .bt path; default (and syscalls-per-record): --compare")
	target := fs.String("target", "", "process to trace: aggregator, producer or all (default: the script's own side)")
	var count, rate, producers, runs int
	bench.CountVar(fs, &count, "count", 2000, "`N` records per producer (--quick: at most 500)")
	bench.CountVar(fs, &rate, "rate", 0, "`N` records/s per producer (default 2000); --overhead: messages/s (default 20000)")
	bench.CountVar(fs, &producers, "producers", 1, "`N` producer processes (each gets its own bpftrace; outputs are summed)")
	compare := fs.Bool("compare", false, "seed 000's table (the default): syscalls per record, producer and aggregator, runtime vs transport")
	overhead := fs.Bool("overhead", false, "seed 002: the fixed-rate latency row with no tracer, an idle tracer and a logging tracer")
	dur := fs.Duration("duration", 0, "--overhead: measured time per tracer (default 5s; --quick 1s)")
	warm := fs.Duration("warmup", 0, "--overhead: excluded warm-up per tracer (default 1s; --quick 200ms)")
	tracers := fs.String("tracers", "none,idle,log", "--overhead: tracer states, measured in this order in every run")
	placements := fs.String("placements", "shared,other", "--overhead: where bpftrace runs for idle and log: shared (CPU 0, with the pinned workload) and/or other (CPU 1)")
	bench.CountVar(fs, &runs, "runs", 0, "--overhead: `N` runs per tracer state, interleaved (default 3; --quick 2)")
	logFile := fs.String("log", "", "--overhead: keep the logging tracer's lines in `FILE` (default: a temporary file, removed)")
	list := fs.Bool("list", false, "list the shipped scripts and exit")
	verbose := fs.Bool("v", false, "copy bpftrace's and the aggregator's stderr to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *list {
		for _, n := range bpftrace.Names() {
			h, _ := bpftrace.Header(n)
			fmt.Printf("%-26s %-10s %s\n", n, tracebench.DefaultTarget(n), strings.TrimPrefix(h, n+" - "))
		}
		return nil
	}
	var topts trace.Options
	var aggLog io.Writer
	if *verbose {
		topts.Stderr, aggLog = os.Stderr, os.Stderr
	}
	if *script == "syscalls-per-record" {
		*script = ""
	}
	if *overhead {
		if *compare || *script != "" {
			return errors.New("--overhead runs its own tracers: drop --script/--compare")
		}
		return traceOverhead(ctx, fs, &c, tracebench.OverheadOptions{Rate: rate,
			Duration: *dur, Warmup: *warm, Quick: c.Quick, LogFile: *logFile, Trace: topts, Tracers: strings.Split(*tracers, ","),
			Placements: strings.Split(*placements, ","), Runs: runs})
	}
	if *compare && *script != "" {
		return errors.New("--compare runs producer_syscalls on both sides: drop --script")
	}
	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	if c.Quick {
		count = min(count, 500)
	}
	o := tracebench.Options{AggregatorBin: agg, ProducerBin: prod, Transports: c.Transports, Sizes: c.Sizes,
		Count: count, Rate: rate, Producers: producers, Trace: topts, Stderr: aggLog}
	if *script != "" {
		tg := tracebench.DefaultTarget(*script)
		if *target != "" {
			if tg, err = tracebench.ParseTarget(*target); err != nil {
				return err
			}
		}
		o.Probes = []tracebench.Probe{{Script: *script, Target: tg}}
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(len(o.Transports)*len(o.Sizes)), c.ProgressEnabled())
	r, err := tracebench.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	return publish(&c, tracebench.Kind, r.Params, r.Rows, r.Notes, tracebench.Tables(r.Rows))
}

func traceOverhead(ctx context.Context, fs *flag.FlagSet, c *bench.Common, o tracebench.OverheadOptions) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["transport"] {
		if len(c.Transports) != 1 {
			return errors.New("--overhead measures one transport at a time")
		}
		o.Transport = c.Transports[0]
	}
	if set["size"] {
		o.Size = c.Sizes[0]
	}
	start := time.Now()
	r, err := tracebench.RunOverhead(ctx, o)
	if err != nil {
		return err
	}
	res := bench.NewResult(tracebench.OverheadKind, r.Params)
	res.Started = start
	res.Rows, res.Notes = r.Rows, r.Notes
	if err := tracebench.WriteMedianRuns(tableOut(c), r.Rows); err != nil {
		return err
	}
	return emit(c, res, tracebench.OverheadTables(r.Rows))
}
