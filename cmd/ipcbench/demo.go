package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ipclab/logagg/internal/bench"
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
	rate := fs.Int("rate", 5000, "records/s of each producer in part 1")
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
		len(c.Transports), *rate, dur, c.Sizes[0])
	r, err := throughput.Run(ctx, throughput.Spec{
		Daemon:      &throughput.Aggregator{Bin: agg, Output: out},
		ProducerBin: prod, Dir: dir, Transports: c.Transports, Producers: 2, Size: c.Sizes[0], Duration: *dur, Rate: *rate,
	})
	if err != nil {
		return err
	}
	t := &bench.Table{Header: []string{"transport", "sent", "written", "lost", "dup", "kernel drops", "records/s", "MB/s"}}
	for _, row := range r.Rows {
		t.Add(row.Transport, row.Sent, row.Written, row.Lost, row.Duplicated, row.KernelDrops, fmt.Sprintf("%.0f", row.RecordsPerS), fmt.Sprintf("%.1f", row.MBPerS))
	}
	t.WriteTo(os.Stdout)
	fmt.Printf("\naggregator: %.0f ns CPU per record, peak RSS %.1f MiB; the records are in %s\n",
		r.AggCPUNs, float64(r.AggPeakRSSKiB)/1024, *output)

	fmt.Printf("\n== 2. each transport alone, 1 producer sending as fast as it can for %s, one write per record\n\n", *soloDur)
	var rows []throughput.Row
	var runs []*throughput.Result
	for _, tr := range c.Transports {
		sdir, err := os.MkdirTemp("", "lgdemo")
		if err != nil {
			return err
		}
		sr, err := throughput.Run(ctx, throughput.Spec{AggregatorBin: agg, ProducerBin: prod, Dir: sdir, Transports: []string{tr},
			Producers: 1, Size: c.Sizes[0], Duration: *soloDur})
		os.RemoveAll(sdir)
		if err != nil {
			return err
		}
		rows = append(rows, sr.Rows...)
		runs = append(runs, sr)
	}
	throughputTable(rows, runs).WriteTo(os.Stdout)
	if *noPeers {
		return nil
	}

	fmt.Printf("\n== 3. the same producer (RFC 3164 lines) against rsyslog and syslog-ng, one transport at a time, 1 producer, %s each\n\n", *soloDur)
	spec := throughput.Spec{ProducerBin: prod, Transports: []string{"unixsock", "tcp", "unixgram", "udp"}, Producers: 1, Size: c.Sizes[0], Duration: *soloDur}
	daemons, err := comparedDaemons(agg)
	if err != nil {
		return err
	}
	cells, err := peers.Compare(ctx, spec, daemons, os.Stderr)
	if err != nil {
		return err
	}
	peersTable(cells).WriteTo(os.Stdout)
	fmt.Println("\nMore: ipcbench throughput | peers | rtt | latency | bufsweep | calibrate, or `make lab` for the whole lab as one HTML report.")
	return nil
}

func globOr(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
