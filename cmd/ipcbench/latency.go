package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/latency"
)

func init() {
	register(&command{name: latency.Kind, summary: "fixed-rate one-way and round-trip latency from the scheduled send time (HdrHistogram), raw and through the aggregator", run: runLatency})
	// Hidden: the echo side of raw latency rows, started by ipcbench itself.
	register(&command{name: latency.EchoSubcommand, summary: "(internal) echo side of `ipcbench latency`", run: func(_ context.Context, args []string) error {
		if code := latency.EchoMain(args); code != 0 {
			os.Exit(code)
		}
		return nil
	}})
}

func runLatency(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(latency.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, strings.Join(latency.RawTransports, ","), "4096")
	var o latency.Options
	bench.CountVar(fs, &o.Rate, "rate", 0, "`N` messages per second (default 20000; --quick 2000)")
	fs.DurationVar(&o.Duration, "duration", 0, "measured sending time per row (default 5s; --quick 1s)")
	fs.DurationVar(&o.Warmup, "warmup", 0, "sending time excluded at the start of each row (default 1s; --quick 100ms)")
	modes := fs.String("mode", "raw,aggregator", "raw (transport to transport, echo process) and/or aggregator (producer -> aggregator -> file)")
	aggBin := fs.String("aggregator", "", "aggregator `binary` for aggregator mode (default: next to ipcbench, else PATH)")
	aggLog := fs.Bool("aggregator-log", false, "copy the aggregator's log lines to stderr")
	fs.BoolVar(&o.Ack, "ack", false, "aggregator mode: unixsock and tcp records in the acknowledged mode (client.WithAck)")
	placements := fs.String("placement", latency.PlaceSame+","+latency.PlaceCross,
		"comma-separated placements of raw rows' sender, echo and receiver threads: same (all on one CPU), cross (the sender alone on one CPU, the echo and the receiver on a second), unpinned; aggregator rows run unpinned")
	fs.StringVar(&o.Pacing, "pacing", latency.PacingSpin, "how the sender waits for each scheduled send: spin (sleep until shortly before, then spin) or sleep (clock_nanosleep to the due time; its wake-up lateness is in every latency)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Quick, o.Transports, o.Sizes = c.Quick, c.Transports, c.Sizes
	o.Modes = strings.Split(*modes, ",")
	o.Placements = strings.Split(*placements, ",")
	var notes []string
	for _, m := range o.Modes {
		if m != latency.ModeAggregator {
			continue
		}
		o.AggregatorBin = *aggBin
		if o.AggregatorBin == "" {
			p, err := siblingBinary("aggregator")
			if err != nil {
				// Raw rows are still worth having; say what was skipped.
				notes = append(notes, "aggregator mode skipped: "+err.Error())
				o.Modes = without(o.Modes, latency.ModeAggregator)
				break
			}
			o.AggregatorBin = p
		}
	}
	if len(o.Modes) == 0 {
		return fmt.Errorf("nothing to run: %s", strings.Join(notes, "; "))
	}
	if *aggLog {
		o.Stderr = os.Stderr
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Progress = bench.NewProgress(os.Stderr, o.Messages(), c.ProgressEnabled())
	rep, err := latency.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	if err := latency.WriteSeedTable(tableOut(&c), rep.Rows); err != nil {
		return err
	}
	notes = append(notes, rep.Notes...)
	return publish(&c, latency.Kind, rep.Params, rep.Rows, append(latency.Notes(rep.Rows), notes...), latency.Tables(rep.Rows))
}

func without(list []string, s string) []string {
	var out []string
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}
