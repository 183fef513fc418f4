package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/conns"
)

func init() {
	register(&command{name: conns.Kind, summary: "N idle unix/TCP connections held while producers run flat out: threads, RSS, fds, records/s", run: runConns})
}

func runConns(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(conns.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, strings.Join(conns.Transports, ","), "100")
	var o conns.Options
	bench.CountsVar(fs, &o.Idle, "idle", nil, "comma-separated idle connection `counts`, one row each (default 0,10000,50000; --quick 0,1000)")
	bench.CountVar(fs, &o.Producers, "producers", 1, "`N` flat-out producers per row")
	fs.DurationVar(&o.Duration, "duration", 0, "how long the producers send in each row (default 5s; --quick 1s)")
	bench.CountVar(fs, &o.Runs, "runs", 1, "measure the whole grid `N` times, one pass after another, and report each cell's median pass by records/s")
	fs.StringVar(&o.CPUs, "cpus", "any", cpusUsage)
	aggLog := fs.Bool("aggregator-log", false, "copy the aggregator's log lines to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if len(c.Sizes) != 1 {
		return fmt.Errorf("--size: conns takes one record size, not %d", len(c.Sizes))
	}
	o.Quick, o.Transports, o.Size = c.Quick, c.Transports, c.Sizes[0]
	if *aggLog {
		o.Stderr = os.Stderr
	}
	var err error
	if o.AggregatorBin, o.ProducerBin, err = workloadBinaries(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(len(o.Transports)*len(o.Idle)*o.Runs), c.ProgressEnabled())
	rep, err := conns.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	return publish(&c, conns.Kind, rep.Params, rep.Rows, rep.Notes, conns.Tables(rep.Rows))
}
