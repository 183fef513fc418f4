package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

func init() {
	register(&command{name: "demo", summary: "the aggregator on every transport at once with producers on each, then a comparison with rsyslog and syslog-ng", run: runDemo})
}

// demo holds the flags of `ipcbench demo` and the binaries it runs.
type demo struct {
	c       bench.Common
	dur     time.Duration // part 1
	rate    int           // part 1, per producer
	solo    time.Duration // parts 2 and 3, per transport
	output  string        // as given, for the message
	noPeers bool

	agg, prod string
}

func parseDemoFlags(args []string) (*demo, error) {
	d := &demo{}
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	d.c.Register(fs, "unixsock,tcp,unixgram,udp,fifo,shm,mq", "100")
	fs.DurationVar(&d.dur, "duration", 3*time.Second, "how long the producers of part 1 send")
	bench.CountVar(fs, &d.rate, "rate", 5000, "`N` records/s of each producer in part 1")
	fs.DurationVar(&d.solo, "solo", 2*time.Second, "how long each transport is driven flat out in parts 2 and 3")
	fs.StringVar(&d.output, "output", "aggregated_logs.jsonl", "the aggregator's output file")
	fs.BoolVar(&d.noPeers, "no-peers", false, "skip the rsyslog/syslog-ng comparison")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if d.c.Quick {
		d.dur, d.solo = time.Second, time.Second
	}
	return d, nil
}

// runDemo is what `make demo` runs: one aggregator serving every transport,
// two producers on each sending flat out, then the table; aggregated_logs.jsonl
// is left in the current directory. Then the same producer against rsyslog
// and syslog-ng, one transport at a time, with the ratios.
func runDemo(ctx context.Context, args []string) error {
	d, err := parseDemoFlags(args)
	if err != nil {
		return err
	}
	if d.agg, d.prod, err = workloadBinaries(); err != nil {
		return err
	}
	out, err := filepath.Abs(d.output)
	if err != nil {
		return err
	}
	for _, old := range append(globOr(out+".*"), out) {
		os.Remove(old) // a fresh file per demo, so the table and the file agree
	}
	dir, err := os.MkdirTemp("", "lgdemo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	if err := d.shared(ctx, out, dir); err != nil {
		return err
	}
	if err := d.alone(ctx); err != nil {
		return err
	}
	if d.noPeers {
		return nil
	}
	if err := d.peers(ctx); err != nil {
		return err
	}
	fmt.Println("\nMore: ipcbench throughput | peers | rtt | latency | bufsweep | calibrate, or `make lab` for the whole lab as one HTML report.")
	return nil
}

// shared is part 1: one aggregator writing to out serves every transport
// at once, two producers on each at the fixed rate.
func (d *demo) shared(ctx context.Context, out, dir string) error {
	c := &d.c
	fmt.Printf("== 1. one aggregator serving %d transports at once, 2 producers on each at %d records/s, %s, %d B records\n\n",
		len(c.Transports), d.rate, d.dur, c.Sizes[0])
	r, err := throughput.Measure(ctx, throughput.Spec{
		Daemon:      &harness.AggregatorDaemon{Bin: d.agg, Output: out},
		ProducerBin: d.prod, Dir: dir, Transports: c.Transports, Producers: 2, Size: c.Sizes[0], Duration: d.dur, Rate: d.rate,
	})
	if err != nil {
		return err
	}
	if err := bench.WriteTables(os.Stdout, throughput.Tables(r.Rows)); err != nil {
		return err
	}
	fmt.Printf("\nthe records are in %s\n", d.output)
	return nil
}

// alone is part 2: each transport on its own, one producer flat out.
func (d *demo) alone(ctx context.Context) error {
	c := &d.c
	fmt.Printf("\n== 2. each transport alone, 1 producer sending as fast as it can for %s, one write per record\n\n", d.solo)
	solo, err := throughput.Run(ctx, throughput.Options{AggregatorBin: d.agg, ProducerBin: d.prod, Transports: c.Transports,
		Sizes: c.Sizes[:1], Producers: []int{1}, Buffers: []int{0}, Duration: d.solo, Output: throughput.OutputFile, Runs: 1})
	if err != nil {
		return err
	}
	if err := bench.WriteTables(os.Stdout, throughput.Tables(solo.Rows)); err != nil {
		return err
	}
	printNotes(solo.Notes)
	return nil
}

// peers is part 3: the same producer against rsyslog and syslog-ng on the
// transports they share with the aggregator.
func (d *demo) peers(ctx context.Context) error {
	fmt.Printf("\n== 3. the same producer (RFC 3164 lines) against rsyslog and syslog-ng, one transport at a time, 1 producer, %s each\n\n", d.solo)
	po := peers.Options{Transports: []string{"unixsock", "tcp", "unixgram", "udp"}, Sizes: d.c.Sizes[:1], Producers: []int{1}, Duration: d.solo, Runs: 1}
	if err := peersOptions(&po); err != nil {
		return err
	}
	cmp, err := peers.Run(ctx, po)
	if err != nil {
		return err
	}
	if err := bench.WriteTables(os.Stdout, peers.Tables(cmp.Rows)); err != nil {
		return err
	}
	printNotes(cmp.Notes)
	return nil
}

func globOr(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
