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

// traceFlags are the flags of `ipcbench trace`.
type traceFlags struct {
	c                      bench.Common
	script, target         string
	count, rate, producers int
	compare, overhead      bool
	list, verbose          bool

	// --overhead only.
	dur, warm           time.Duration
	tracers, placements string
	runs                int
	logFile             string

	// set holds the names of the flags given on the command line.
	set map[string]bool
}

func parseTraceFlags(args []string) (*traceFlags, error) {
	f := &traceFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet(tracebench.Kind, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), traceUsage); fs.PrintDefaults() }
	f.c.Register(fs, "unixsock,tcp,unixgram,udp,fifo", "100")
	fs.StringVar(&f.script, "script", "", "shipped script name (see --list) or a .bt path; default (and syscalls-per-record): --compare")
	fs.StringVar(&f.target, "target", "", "process to trace: aggregator, producer or all (default: the script's own side)")
	bench.CountVar(fs, &f.count, "count", 2000, "`N` records per producer (--quick: at most 500)")
	bench.CountVar(fs, &f.rate, "rate", 0, "`N` records/s per producer (default 2000); --overhead: messages/s (default 20000)")
	bench.CountVar(fs, &f.producers, "producers", 1, "`N` producer processes (each gets its own bpftrace; outputs are summed)")
	fs.BoolVar(&f.compare, "compare", false, "seed 000's table (the default): syscalls per record, producer and aggregator, runtime vs transport")
	fs.BoolVar(&f.overhead, "overhead", false, "seed 002: the fixed-rate latency row with no tracer, an idle tracer and a logging tracer")
	fs.DurationVar(&f.dur, "duration", 0, "--overhead: measured time per tracer (default 5s; --quick 1s)")
	fs.DurationVar(&f.warm, "warmup", 0, "--overhead: excluded warm-up per tracer (default 1s; --quick 200ms)")
	fs.StringVar(&f.tracers, "tracers", "none,idle,log", "--overhead: tracer states, measured in this order in every run")
	fs.StringVar(&f.placements, "placements", "shared,other", "--overhead: where bpftrace runs for idle and log: shared (CPU 0, with the pinned workload) and/or other (CPU 1)")
	bench.CountVar(fs, &f.runs, "runs", 0, "--overhead: `N` runs per tracer state, interleaved (default 3; --quick 2)")
	fs.StringVar(&f.logFile, "log", "", "--overhead: keep the logging tracer's lines in `FILE` (default: a temporary file, removed)")
	fs.BoolVar(&f.list, "list", false, "list the shipped scripts and exit")
	fs.BoolVar(&f.verbose, "v", false, "copy bpftrace's and the aggregator's stderr to stderr")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if f.script == "syscalls-per-record" {
		f.script = ""
	}
	return f, nil
}

func runTrace(ctx context.Context, args []string) error {
	f, err := parseTraceFlags(args)
	if err != nil {
		return err
	}
	if f.list {
		printTraceScripts()
		return nil
	}
	var topts trace.Options
	var aggLog io.Writer
	if f.verbose {
		topts.Stderr, aggLog = os.Stderr, os.Stderr
	}
	if f.overhead {
		if f.compare || f.script != "" {
			return errors.New("--overhead runs its own tracers: drop --script/--compare")
		}
		return traceOverhead(ctx, f, topts)
	}
	if f.compare && f.script != "" {
		return errors.New("--compare runs producer_syscalls on both sides: drop --script")
	}
	o, err := f.options(topts, aggLog)
	if err != nil {
		return err
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(len(o.Transports)*len(o.Sizes)), f.c.ProgressEnabled())
	r, err := tracebench.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	return publish(&f.c, tracebench.Kind, r.Params, r.Rows, r.Notes, tracebench.Tables(r.Rows))
}

// printTraceScripts is --list: every shipped script with the side it
// traces and what it answers.
func printTraceScripts() {
	for _, n := range bpftrace.Names() {
		h, _ := bpftrace.Header(n)
		fmt.Printf("%-26s %-10s %s\n", n, tracebench.DefaultTarget(n), strings.TrimPrefix(h, n+" - "))
	}
}

// options are the tracebench options of a syscalls-per-record (--compare)
// or --script run, validated.
func (f *traceFlags) options(topts trace.Options, aggLog io.Writer) (tracebench.Options, error) {
	agg, prod, err := workloadBinaries()
	if err != nil {
		return tracebench.Options{}, err
	}
	count := f.count
	if f.c.Quick {
		count = min(count, 500)
	}
	o := tracebench.Options{AggregatorBin: agg, ProducerBin: prod, Transports: f.c.Transports, Sizes: f.c.Sizes,
		Count: count, Rate: f.rate, Producers: f.producers, Trace: topts, Stderr: aggLog}
	if f.script != "" {
		tg := tracebench.DefaultTarget(f.script)
		if f.target != "" {
			if tg, err = tracebench.ParseTarget(f.target); err != nil {
				return tracebench.Options{}, err
			}
		}
		o.Probes = []tracebench.Probe{{Script: f.script, Target: tg}}
	}
	if err := o.Validate(); err != nil {
		return tracebench.Options{}, err
	}
	return o, nil
}

// traceOverhead is --overhead: seed 002's table, with --transport and
// --size (one of each) only where given, so that the kind's defaults apply
// otherwise.
func traceOverhead(ctx context.Context, f *traceFlags, topts trace.Options) error {
	o := tracebench.OverheadOptions{Rate: f.rate, Duration: f.dur, Warmup: f.warm, Quick: f.c.Quick,
		LogFile: f.logFile, Trace: topts, Tracers: strings.Split(f.tracers, ","),
		Placements: strings.Split(f.placements, ","), Runs: f.runs}
	c := &f.c
	if f.set["transport"] {
		if len(c.Transports) != 1 {
			return errors.New("--overhead measures one transport at a time")
		}
		o.Transport = c.Transports[0]
	}
	if f.set["size"] {
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
