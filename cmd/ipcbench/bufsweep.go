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
	register(&command{name: "bufsweep", summary: "fixed volume through write buffers of 1 B..1 MiB over tcp/unixsock/fifo, with network faults", run: runBufsweep})
}

func runBufsweep(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bufsweep", flag.ContinueOnError)
	var c bench.Common
	sizes := make([]string, len(bufsweep.DefaultSizes))
	for i, s := range bufsweep.DefaultSizes {
		sizes[i] = bench.FormatSize(s)
	}
	c.Register(fs, strings.Join(bufsweep.Transports, ","), strings.Join(sizes, ","))
	var o bufsweep.Options
	volume := fs.String("volume", "", "bytes moved per row (default 64MiB; --quick 4MiB)")
	fs.IntVar(&o.MaxWrites, "max-writes", 0, "cap small-buffer rows at this many writes (default 1048576; --quick 20000)")
	fs.IntVar(&o.RecordSize, "record-size", 100, "bytes per application write into the buffer")
	faults := fs.String("faults", "", "fault profiles for tcp: none,"+strings.Join(bufsweep.ProfileNames(), ",")+
		" or all (default "+strings.Join(bufsweep.DefaultFaults, ",")+"; --quick "+strings.Join(bufsweep.QuickFaults, ",")+")")
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
	nsizes := len(o.Sizes)
	if nsizes == 0 {
		nsizes = len(bufsweep.QuickSizes)
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(nsizes*len(o.Transports)*len(o.Faults)), c.ProgressEnabled())
	rep, err := bufsweep.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	res := bench.NewResult("bufsweep", rep.Params)
	res.Rows, res.Notes = rep.Rows, rep.Notes
	return finish(&c, res, bufsweep.Table(rep.Rows))
}
