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

// runDemo is what `make demo` runs: one aggregator serving every transport,
// two producers on each sending flat out, then the table; aggregated_logs.jsonl
// is left in the current directory. Then the same producer against rsyslog
// and syslog-ng, one transport at a time, with the ratios.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp,fifo,shm,mq", "100")
	dur := fs.Duration("duration", 3*time.Second, "how long the producers of part 1 send")
	var rate int
	bench.CountVar(fs, &rate, "rate", 5000, "`N` records/s of each producer in part 1")
	soloDur := fs.Duration("solo", 2*time.Second, "how long each transport is driven flat out in parts 2 and 3")
	output := fs.String("output", "aggregated_logs.jsonl", "the aggregator's output file")
	noPeers := fs.Bool("no-peers", false, "skip the rsyslog/syslog-ng comparison")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Quick {
		*dur, *soloDur = time.Second, time.Second
	}
	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	out, err := filepath.Abs(*output)
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

	fmt.Printf("== 1. one aggregator serving %d transports at once, 2 producers on each at %d records/s, %s, %d B records\n\n",
		len(c.Transports), rate, dur, c.Sizes[0])
	r, err := throughput.Measure(ctx, throughput.Spec{
		Daemon:      &harness.AggregatorDaemon{Bin: agg, Output: out},
		ProducerBin: prod, Dir: dir, Transports: c.Transports, Producers: 2, Size: c.Sizes[0], Duration: *dur, Rate: rate,
	})
	if err != nil {
		return err
	}
	if err := bench.WriteTables(os.Stdout, throughput.Tables(r.Rows)); err != nil {
		return err
	}
	fmt.Printf("\nthe records are in %s\n", *output)

	fmt.Printf("\n== 2. each transport alone, 1 producer sending as fast as it can for %s, one write per record\n\n", *soloDur)
	solo, err := throughput.Run(ctx, throughput.Options{AggregatorBin: agg, ProducerBin: prod, Transports: c.Transports,
		Sizes: c.Sizes[:1], Producers: []int{1}, Buffers: []int{0}, Duration: *soloDur, Output: throughput.OutputFile, Runs: 1})
	if err != nil {
		return err
	}
	if err := bench.WriteTables(os.Stdout, throughput.Tables(solo.Rows)); err != nil {
		return err
	}
	printNotes(solo.Notes)
	if *noPeers {
		return nil
	}

	fmt.Printf("\n== 3. the same producer (RFC 3164 lines) against rsyslog and syslog-ng, one transport at a time, 1 producer, %s each\n\n", *soloDur)
	po := peers.Options{Transports: []string{"unixsock", "tcp", "unixgram", "udp"}, Sizes: c.Sizes[:1], Producers: []int{1}, Duration: *soloDur, Runs: 1}
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
	fmt.Println("\nMore: ipcbench throughput | peers | rtt | latency | bufsweep | calibrate, or `make lab` for the whole lab as one HTML report.")
	return nil
}

func globOr(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
