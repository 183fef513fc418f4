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
	dur := fs.Duration("duration", 3*time.Second, "how long the producers send")
	output := fs.String("output", "aggregated_logs.jsonl", "the aggregator's output file")
	noPeers := fs.Bool("no-peers", false, "skip the rsyslog/syslog-ng comparison")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Quick {
		*dur = time.Second
	}
	agg, err := siblingBinary("aggregator")
	if err != nil {
		return err
	}
	prod, err := siblingBinary("producer")
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

	fmt.Printf("== logagg: one aggregator, %d transports at once, 2 producers each, %s flat out, %d B records\n\n", len(c.Transports), dur, c.Sizes[0])
	r, err := throughput.Run(ctx, throughput.Spec{
		Daemon:      &throughput.Aggregator{Bin: agg, Output: out},
		ProducerBin: prod, Dir: dir, Transports: c.Transports, Producers: 2, Size: c.Sizes[0], Duration: *dur,
	})
	if err != nil {
		return err
	}
	t := &bench.Table{Header: []string{"transport", "sent", "written", "lost", "dup", "kernel drops", "records/s", "MB/s"}}
	for _, row := range r.Rows {
		t.Add(row.Transport, row.Sent, row.Written, row.Lost, row.Duplicated, row.KernelDrops, fmt.Sprintf("%.0f", row.RecordsPerS), fmt.Sprintf("%.1f", row.MBPerS))
	}
	t.WriteTo(os.Stdout)
	fmt.Printf("\naggregator: %.0f ns CPU per record, peak RSS %.1f MiB; records are in %s\n",
		r.AggCPUNs, float64(r.AggPeakRSSKiB)/1024, *output)
	fmt.Println("(all transports share the machine's 2 vCPUs at once; `ipcbench throughput` measures each alone)")
	if *noPeers {
		return nil
	}

	fmt.Printf("\n== the same producer against rsyslog and syslog-ng, one transport at a time, 1 producer, %s each\n\n", dur)
	spec := throughput.Spec{ProducerBin: prod, Transports: []string{"unixsock", "tcp", "unixgram", "udp"}, Producers: 1, Size: c.Sizes[0], Duration: *dur}
	cells, err := peers.Compare(ctx, spec, peers.DefaultDaemons(agg), os.Stderr)
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
