package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/peers"
)

func init() {
	register(&command{name: peers.Kind, summary: "the throughput workload against rsyslog and syslog-ng, side by side", run: runPeers})
	// Hidden: the null-reader row of peers and demo, started by ipcbench itself.
	register(&command{name: peers.NullReaderSubcommand, summary: "(internal) the null reader of `ipcbench peers`", run: func(_ context.Context, args []string) error {
		if code := peers.NullReaderMain(args); code != 0 {
			os.Exit(code)
		}
		return nil
	}})
}

// peersOptions fills in the binaries: ours, the producer, and this one as
// the null reader (what the same producers reach when the reader does no
// work).
func peersOptions(o *peers.Options) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	o.NullReaderBin = self
	o.AggregatorBin, o.ProducerBin, err = workloadBinaries()
	return err
}

func runPeers(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(peers.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp", "100")
	var o peers.Options
	bench.CountsVar(fs, &o.Producers, "producers", []int{1, 4}, "comma-separated producer `counts`")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "how long producers send in each cell")
	bench.CountVar(fs, &o.Rate, "rate", 0, "`N` records/s per producer (0 = as fast as possible)")
	fs.StringVar(&o.CPUs, "cpus", "any", cpusUsage)
	bench.CountVar(fs, &o.Runs, "runs", 1, "run every cell `N` times, daemons interleaved, and report the run with the median records/s per daemon")
	configs := fs.String("configs", "", "also write every daemon's configuration into `DIR`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Quick {
		o.Duration = time.Second
	}
	o.Transports, o.Sizes = c.Transports, c.Sizes
	if err := o.Validate(); err != nil {
		return err
	}
	if err := peersOptions(&o); err != nil {
		return err
	}
	res, err := peers.Run(ctx, o)
	if err != nil {
		return err
	}
	if *configs != "" {
		if err := os.MkdirAll(*configs, 0o755); err != nil {
			return err
		}
		if err := peers.ConfigsDir(*configs, res.Rows); err != nil {
			return err
		}
		res.Notes = append(res.Notes, "configs written to "+filepath.Clean(*configs))
	}
	return publish(&c, peers.Kind, res.Params, res.Rows, res.Notes, peers.Tables(res.Rows))
}
