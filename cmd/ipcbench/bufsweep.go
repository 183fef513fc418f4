package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/bufsweep"
)

func init() {
	register(&command{name: bufsweep.Kind, summary: "the same volume through write buffers of 1 B..1 MiB over tcp/unixsock/fifo, with packet loss and delay", run: runBufsweep})
	// Hidden: the loss rows' side inside a private network namespace.
	register(&command{name: bufsweep.NetnsChildSubcommand, run: func(ctx context.Context, _ []string) error {
		return bufsweep.NetnsChild(ctx, os.Stdin, os.Stdout)
	}})
}

func runBufsweep(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(bufsweep.Kind, flag.ContinueOnError)
	var c bench.Common
	sizes := make([]string, len(bufsweep.DefaultSizes))
	for i, s := range bufsweep.DefaultSizes {
		sizes[i] = bench.FormatSize(s)
	}
	c.Register(fs, strings.Join(bufsweep.Transports, ","), strings.Join(sizes, ","))
	var o bufsweep.Options
	volume := fs.String("volume", "", "bytes every row moves, the same for every buffer size (default "+
		bench.FormatSize(bufsweep.DefaultVolume)+"; --quick "+bench.FormatSize(bufsweep.QuickVolume)+")")
	bench.CountVar(fs, &o.Runs, "runs", 0, "`N` measurements per row, interleaved; rows report the median and min..max (default 3; --quick 1)")
	fs.IntVar(&o.RecordSize, "record-size", 100, "bytes per application write into the buffer")
	faults := fs.String("faults", "", "fault profiles for tcp: "+strings.Join(bufsweep.ProfileNames(), ",")+
		" or all (default "+strings.Join(bufsweep.DefaultFaults, ",")+"; --quick "+strings.Join(bufsweep.QuickFaults, ",")+
		"). loss* run in a private network namespace with an nftables drop rule (root and nft, else skipped); "+
		"delay*/bw* through toxiproxy, per chunk, not per packet")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	o.Quick, o.Transports = c.Quick, c.Transports
	if explicit["size"] || !c.Quick {
		o.Sizes = c.Sizes // else the quick default set
	}
	if *volume != "" {
		v, err := bench.ParseSize(*volume)
		if err != nil {
			return err
		}
		o.Volume = v
	}
	switch *faults {
	case "":
		o.Faults = bufsweep.DefaultFaults
		if c.Quick {
			o.Faults = bufsweep.QuickFaults
		}
	case "all":
		o.Faults = bufsweep.DefaultFaults
	default:
		o.Faults = strings.Split(*faults, ",")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	o.Progress = bench.NewProgress(os.Stderr, o.Measurements(), c.ProgressEnabled())
	rep, err := bufsweep.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	return publish(&c, bufsweep.Kind, rep.Params, rep.Rows, rep.Notes, bufsweep.Tables(rep.Rows))
}
