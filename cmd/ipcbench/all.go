package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/bench/bufsweep"
	"github.com/ipclab/logagg/internal/bench/calibrate"
	"github.com/ipclab/logagg/internal/bench/conns"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/report"
)

func init() {
	register(&command{name: "all", summary: "run a short version of every experiment and render one HTML report", run: runAll})
}

// The lab in one command:
//
//	ipcbench all [--quick] [-o report.html] [--dir DIR]
//	   │
//	   ├─ for each step: re-execute this binary as `ipcbench STEP ... --json DIR/STEP.json`
//	   │     (own process group, own log DIR/STEP.log, a time limit; a failure is
//	   │      recorded and the next step runs)
//	   └─ report.Report{Inputs, Samples, Runs} → -o HTML and DIR/report.md
//
// Steps run as separate processes so that one step's crash, leaked thread
// or locked OS thread cannot disturb the next one's measurements, and so
// that a hung step can be killed with everything it started.

// allStep is one subcommand run by `all`.
type allStep struct {
	name  string
	cmd   string   // the subcommand; default name
	quick []string // extra arguments in --quick mode
	full  []string // extra arguments otherwise
	// samples is the samples CSV the step writes, if any.
	samples string
	// needsRoot steps are skipped (with a note) when not root.
	needsRoot bool
}

func (s allStep) command() string {
	if s.cmd != "" {
		return s.cmd
	}
	return s.name
}

func allSteps(dir string) []allStep {
	samples := filepath.Join(dir, "rtt-samples.csv")
	return []allStep{
		{name: calibrate.Kind},
		// The calibrate step supplies the calibration block.
		{name: "rtt", quick: []string{"--no-calibrate", "--samples", samples}, full: []string{"--no-calibrate", "--samples", samples}, samples: samples},
		{name: latency.Kind},
		{name: bufsweep.Kind},
		// A producer buffer sweep so that the report can plot throughput and
		// CPU per record against buffer size; 100 B records, one producer.
		{name: throughput.Kind, quick: []string{"--size", "100", "--producers", "1", "--buffer", "0,4096"},
			full: []string{"--buffer", "0,4096,65536"}},
		// Idle connections held while producers run: --quick holds 1000
		// per transport (about 15 s); the full grid up to 50,000 takes
		// minutes, most of it accepting TCP connections.
		{name: conns.Kind},
		{name: peers.Kind, quick: []string{"--size", "100", "--producers", "1"}},
		// Seed 000's syscalls-per-record table, and latency histograms of
		// the aggregator's syscalls (bpftrace, root only).
		{name: "trace", needsRoot: true, quick: []string{"--compare", "--transport", "unixsock,udp"}, full: []string{"--compare"}},
		{name: "trace-latency", cmd: "trace", needsRoot: true, quick: []string{"--script", "syscall_latency", "--transport", "unixsock"},
			full: []string{"--script", "syscall_latency"}},
		// Seed 002: what tracing costs the fixed-rate latency row. --quick
		// is 2 interleaved runs of 1 s per tracer state (about 30 s).
		{name: "trace-overhead", cmd: "trace", needsRoot: true, quick: []string{"--overhead"}, full: []string{"--overhead"}},
	}
}

// allOptions are the flags of `ipcbench all`, with their defaults filled
// in.
type allOptions struct {
	quick      bool
	out, md    string // the HTML and Markdown reports
	dir        string // results, samples and logs
	only, skip string // comma-separated step names
	limit      time.Duration
}

func parseAllFlags(args []string) (allOptions, error) {
	var o allOptions
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	fs.BoolVar(&o.quick, "quick", false, "short runs: a few minutes on a 2-vCPU machine")
	fs.StringVar(&o.out, "o", "report.html", "write the HTML report to `FILE`")
	fs.StringVar(&o.md, "md", "", "write the Markdown summary to `FILE` (default DIR/report.md)")
	fs.StringVar(&o.dir, "dir", "", "keep results, samples and logs in `DIR` (default ./ipcbench-lab-TIMESTAMP)")
	fs.StringVar(&o.only, "only", "", "comma-separated steps to run (default all: calibrate,rtt,latency,bufsweep,throughput,conns,peers,trace,trace-latency,trace-overhead)")
	fs.StringVar(&o.skip, "skip", "", "comma-separated steps to leave out")
	fs.DurationVar(&o.limit, "step-timeout", 0, "time limit per step (default 5m with --quick, 2h without)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.limit == 0 {
		o.limit = 2 * time.Hour
		if o.quick {
			o.limit = 5 * time.Minute
		}
	}
	if o.dir == "" {
		o.dir = "ipcbench-lab-" + time.Now().Format("20060102-150405")
	}
	if o.md == "" {
		o.md = filepath.Join(o.dir, "report.md")
	}
	return o, nil
}

func runAll(ctx context.Context, args []string) error {
	o, err := parseAllFlags(args)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot re-execute myself: %w", err)
	}
	steps := allSteps(o.dir)
	want, err := selectSteps(steps, o.only, o.skip)
	if err != nil {
		return err
	}

	rep := &report.Report{Title: "ipcbench lab report", Generated: time.Now()}
	if o.quick {
		rep.Notes = append(rep.Notes, "ipcbench all --quick: every figure comes from a short run; rerun a subcommand without --quick before citing it.")
	}
	ok := runSteps(ctx, rep, self, o, steps, want)
	if err := writeReport(rep, o.out, o.md); err != nil {
		return err
	}
	fmt.Println("results:", o.dir)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if ok == 0 && len(rep.Runs) > 0 {
		return fmt.Errorf("every step failed; see the logs in %s", o.dir)
	}
	return nil
}

// runSteps runs the wanted steps in order until ctx ends, printing one
// line per step and adding each run (with its result and samples) to rep.
// It returns how many steps gave a readable result.
func runSteps(ctx context.Context, rep *report.Report, self string, o allOptions, steps []allStep, want map[string]bool) int {
	ok := 0
	for _, st := range steps {
		if !want[st.name] {
			continue
		}
		if err := ctx.Err(); err != nil {
			break
		}
		if why := whyNotRun(st); why != "" {
			rep.Notes = append(rep.Notes, st.name+" not run: "+why)
			continue
		}
		run := runStep(ctx, self, o.dir, st, o.quick, o.limit)
		status := "ok"
		if run.Err != "" {
			status = "FAILED: " + run.Err
		}
		fmt.Printf("== %-13s %s (%s)\n", st.name, status, run.Duration.Round(100*time.Millisecond))
		if addStepResult(rep, st, &run) {
			ok++
		}
		rep.Runs = append(rep.Runs, run)
	}
	return ok
}

// whyNotRun says why a wanted step cannot run here, or "" if it can.
func whyNotRun(st allStep) string {
	if _, registered := commands[st.command()]; !registered {
		return "this ipcbench has no " + st.command() + " subcommand"
	}
	if st.needsRoot && os.Geteuid() != 0 {
		return "it needs root (bpftrace)"
	}
	return ""
}

// addStepResult loads a finished step's result and samples into rep and
// reports whether the result was readable. An unreadable result makes the
// run failed; a failed run keeps no result path.
func addStepResult(rep *report.Report, st allStep, run *report.Run) bool {
	loaded := false
	if run.Err == "" {
		in, err := report.Load(run.Result)
		if err != nil {
			run.Err = "result unreadable: " + err.Error()
		} else {
			rep.Inputs = append(rep.Inputs, in)
			loaded = true
		}
	}
	if st.samples != "" && run.Err == "" {
		if s, err := report.LoadSamples(st.samples); err != nil {
			rep.Notes = append(rep.Notes, "rtt samples not plotted: "+err.Error())
		} else {
			rep.Samples = append(rep.Samples, s)
		}
	}
	if run.Err != "" {
		run.Result = ""
	}
	return loaded
}

// selectSteps applies --only and --skip; an unknown name is an error so a
// typo does not silently run nothing.
func selectSteps(steps []allStep, only, skip string) (map[string]bool, error) {
	known := map[string]bool{}
	for _, s := range steps {
		known[s.name] = true
	}
	parse := func(list string) ([]string, error) {
		var out []string
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if !known[n] {
				return nil, fmt.Errorf("unknown step %q (steps: calibrate,rtt,latency,bufsweep,throughput,conns,peers,trace,trace-latency,trace-overhead)", n)
			}
			out = append(out, n)
		}
		return out, nil
	}
	want := map[string]bool{}
	names, err := parse(only)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		want = known
	}
	for _, n := range names {
		want[n] = true
	}
	drop, err := parse(skip)
	if err != nil {
		return nil, err
	}
	for _, n := range drop {
		delete(want, n)
	}
	return want, nil
}

// runStep runs one subcommand as a child process with its output in
// DIR/NAME.log. The child gets its own process group so that a timeout or
// Ctrl-C stops everything it started (aggregators, producers, peers).
func runStep(ctx context.Context, self, dir string, st allStep, quick bool, limit time.Duration) report.Run {
	res := filepath.Join(dir, st.name+".json")
	logPath := filepath.Join(dir, st.name+".log")
	args := []string{st.command(), "--json", res, "--no-progress"}
	if quick {
		args = append(args, "--quick")
		args = append(args, st.quick...)
	} else {
		args = append(args, st.full...)
	}
	run := report.Run{Name: st.name, Args: args, Result: res, Log: logPath}
	os.Remove(res) // a stale result must not pass for this run's
	logf, err := os.Create(logPath)
	if err != nil {
		run.Err = err.Error()
		return run
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ ipcbench %s\n", strings.Join(args, " "))
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(sctx, self, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// SIGTERM first: subcommands stop their children and clean up.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	cmd.WaitDelay = 15 * time.Second
	start := time.Now()
	err = cmd.Run()
	run.Duration = time.Since(start)
	if cmd.Process != nil {
		// Whatever the step left behind in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	switch {
	case sctx.Err() == context.DeadlineExceeded:
		run.Err = fmt.Sprintf("timed out after %s", limit)
	case err != nil:
		run.Err = fmt.Sprintf("%v: %s", err, lastLine(logPath))
	default:
		if _, serr := os.Stat(res); serr != nil {
			run.Err = "no result file written"
			if errors.Is(serr, os.ErrNotExist) {
				run.Err += ": " + lastLine(logPath)
			}
		}
	}
	return run
}

// lastLine is the last non-empty line of a log: where subcommands print
// their error.
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	l := strings.TrimSpace(lines[len(lines)-1])
	if len(l) > 300 {
		l = l[:300] + "…"
	}
	return l
}
