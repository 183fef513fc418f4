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
	register(&command{name: "trace", summary: "bpftrace scripts on a live aggregator + producers; syscalls per record (--compare); tracing overhead (--overhead)", run: runTrace})
}

// traceParams are saved with every trace result.
type traceParams struct {
	Mode       string   `json:"mode"` // script, compare, overhead
	Script     string   `json:"script,omitempty"`
	Target     string   `json:"target,omitempty"`
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Count      int      `json:"count,omitempty"`
	Rate       int      `json:"rate"`
	Producers  int      `json:"producers,omitempty"`
	Duration   string   `json:"duration,omitempty"`
	Runs       int      `json:"runs,omitempty"`
	Placements []string `json:"placements,omitempty"`
	Warmup     string   `json:"warmup,omitempty"`
}

const traceUsage = `usage:
  ipcbench trace --script NAME --transport LIST [--target aggregator|producer|all] [--size N] [--count N] [--rate N] [--producers N]
  ipcbench trace --compare [--transport LIST] [--count N] [--rate N] [--top N]     (= --script syscalls-per-record)
  ipcbench trace --overhead [--transport tcp] [--size 4096] [--rate 20000] [--duration 5s] [--warmup 1s] [--tracers none,idle,log] [--placements shared,other] [--runs 3] [--log FILE] [--quick]
  ipcbench trace --list

Needs root (bpftrace) and the aggregator and producer binaries next to ipcbench.
`

func runTrace(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), traceUsage); fs.PrintDefaults() }
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp,fifo", "100")
	script := fs.String("script", "", "shipped script name (see --list) or a .bt path; syscalls-per-record = --compare")
	target := fs.String("target", "", "process to trace: aggregator, producer or all (default: the script's own side)")
	count := fs.Int("count", 2000, "records per producer")
	rate := fs.Int("rate", 0, "records/s per producer (default 2000); --overhead: messages/s (default 20000)")
	producers := fs.Int("producers", 1, "producer processes (each gets its own bpftrace; outputs are summed)")
	compare := fs.Bool("compare", false, "seed 000's table: syscalls per record, producer and aggregator, runtime vs transport")
	top := fs.Int("top", 8, "--compare: syscalls listed per row")
	overhead := fs.Bool("overhead", false, "seed 002: the fixed-rate latency row with no tracer, an idle tracer and a logging tracer")
	dur := fs.Duration("duration", 0, "--overhead: measured time per tracer (default 5s; --quick 1s)")
	warm := fs.Duration("warmup", 0, "--overhead: excluded warm-up per tracer (default 1s; --quick 200ms)")
	tracers := fs.String("tracers", "none,idle,log", "--overhead: tracer states, measured in this order in every run")
	placements := fs.String("placements", "shared,other", "--overhead: where bpftrace runs for idle and log: shared (CPU 0, with the pinned workload) and/or other (CPU 1)")
	runs := fs.Int("runs", 0, "--overhead: runs per tracer state, interleaved (default 3; --quick 2)")
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
	setSize := false
	fs.Visit(func(f *flag.Flag) { setSize = setSize || f.Name == "size" })
	var topts trace.Options
	var aggLog io.Writer
	if *verbose {
		topts.Stderr, aggLog = os.Stderr, os.Stderr
	}
	if *script == "syscalls-per-record" {
		*compare = true
	}
	switch {
	case *overhead:
		if *compare || *script != "" {
			return errors.New("--overhead runs its own tracers: drop --script/--compare")
		}
		transport := "tcp"
		if transportSet(fs) {
			if len(c.Transports) != 1 {
				return errors.New("--overhead measures one transport at a time")
			}
			transport = c.Transports[0]
		}
		size := 4096
		if setSize {
			size = c.Sizes[0]
		}
		return traceOverhead(ctx, &c, tracebench.OverheadSpec{Transport: transport, Size: size, Rate: *rate,
			Duration: *dur, Warmup: *warm, Quick: c.Quick, LogFile: *logFile, Trace: topts, Tracers: strings.Split(*tracers, ","),
			Placements: strings.Split(*placements, ","), Runs: *runs})
	case *compare:
		if *script != "" && *script != "syscalls-per-record" {
			return errors.New("--compare runs producer_syscalls on both sides: drop --script")
		}
	case *script == "":
		return errors.New("--script NAME, --compare or --overhead is required (--list shows the scripts)")
	}

	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	if *rate == 0 {
		*rate = 2000
	}
	if c.Quick && *count > 500 {
		*count = 500
	}
	p := traceParams{Mode: "script", Script: *script, Transports: c.Transports, Sizes: c.Sizes, Count: *count, Rate: *rate, Producers: *producers}
	probes := tracebench.CompareProbes
	if *compare {
		p.Mode, p.Script, p.Target = "compare", "producer_syscalls", "producer+aggregator"
	} else {
		tg := tracebench.DefaultTarget(*script)
		if *target != "" {
			if tg, err = tracebench.ParseTarget(*target); err != nil {
				return err
			}
		}
		p.Target = string(tg)
		probes = []tracebench.Probe{{Script: *script, Target: tg}}
	}
	var rows []tracebench.Row
	var notes []string
	bar := bench.NewProgress(os.Stderr, int64(len(c.Transports)*len(c.Sizes)), c.ProgressEnabled())
	for _, t := range c.Transports {
		for _, size := range c.Sizes {
			bar.SetLabel(fmt.Sprintf("%s %dB", t, size))
			r, err := tracebench.Run(ctx, tracebench.Spec{AggregatorBin: agg, ProducerBin: prod, Transport: t, Size: size,
				Count: *count, Rate: *rate, Producers: *producers, Probes: probes, Trace: topts, Stderr: aggLog})
			bar.Add(1)
			if err != nil {
				if ctx.Err() != nil || r == nil && fatalTraceErr(err) {
					bar.Done()
					return err
				}
				notes = append(notes, fmt.Sprintf("%s size=%d: %v", t, size, err))
				if r == nil {
					continue
				}
			}
			if r.Written < r.Sent {
				notes = append(notes, fmt.Sprintf("%s size=%d: %d of %d records written when the trace stopped", t, size, r.Written, r.Sent))
			}
			rows = append(rows, r.Rows...)
		}
	}
	bar.Done()
	if len(rows) == 0 {
		return fmt.Errorf("no run succeeded: %s", strings.Join(notes, "; "))
	}
	if !*compare {
		res := bench.NewResult("trace", p)
		res.Rows, res.Notes = rows, notes
		return finish(&c, res, tracebench.Table(rows))
	}
	var srows []tracebench.SyscallRow
	for _, r := range rows {
		s, err := tracebench.PerRecord(r, 0)
		if err != nil {
			notes = append(notes, err.Error())
			continue
		}
		srows = append(srows, s)
	}
	notes = append(notes, "per record = syscalls / records sent; a producer is counted from its execve (Go runtime start-up included), the aggregator from when it is ready (start-up excluded); R = Go runtime, T = transport, O = other (trace.CategoryOf); read/write include the Go netpoller's eventfd wake-ups, which CategoryOf cannot tell apart")
	res := bench.NewResult("trace-syscalls", p)
	res.Rows, res.Notes = srows, notes
	shown := make([]tracebench.SyscallRow, len(srows))
	for i, s := range srows {
		shown[i] = s
		if *top > 0 && len(s.Top) > *top {
			shown[i].Top = s.Top[:*top]
		}
	}
	return finish(&c, res, tracebench.CompareTable(shown))
}

// fatalTraceErr is an error that every other run would repeat too.
func fatalTraceErr(err error) bool {
	var pe *trace.ProbeError
	return errors.Is(err, trace.ErrNotRoot) || errors.Is(err, trace.ErrNoBpftrace) || errors.Is(err, trace.ErrNoTracefs) ||
		errors.Is(err, tracebench.ErrBadSpec) || errors.As(err, &pe)
}

func transportSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "transport" })
	return set
}

func traceOverhead(ctx context.Context, c *bench.Common, o tracebench.OverheadSpec) error {
	start := time.Now()
	rows, err := tracebench.Overhead(ctx, o)
	if err != nil {
		return err
	}
	p := traceParams{Mode: "overhead", Transports: []string{o.Transport}, Sizes: []int{o.Size}, Rate: o.Rate}
	if len(rows) > 0 {
		l := rows[0].Latency
		p.Rate = l.Rate
		p.Sizes = []int{l.Size}
	}
	if o.Duration > 0 {
		p.Duration = o.Duration.String()
	}
	if o.Warmup > 0 {
		p.Warmup = o.Warmup.String()
	}
	runs := 0
	for _, r := range rows {
		runs = max(runs, r.Run)
	}
	p.Runs, p.Placements = runs, o.Placements
	res := bench.NewResult("trace-overhead", p)
	res.Started = start
	res.Rows = rows
	res.Notes = append(res.Notes, tracebench.OverheadNotes(rows)...)
	for _, r := range rows {
		for _, n := range r.Latency.Notes {
			res.Notes = append(res.Notes, fmt.Sprintf("%s run %d: %s", r.State(), r.Run, n))
		}
		if r.Latency.Error != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("%s run %d: %s", r.State(), r.Run, r.Latency.Error))
		}
	}
	out := io.Writer(os.Stdout)
	if c.JSONPath == "-" {
		out = os.Stderr
	}
	if err := tracebench.WriteOverhead(out, rows); err != nil {
		return err
	}
	fmt.Fprintln(out, "Difference from no tracer (median run minus median run):")
	return finish(c, res, tracebench.OverheadDiffTable(rows))
}
