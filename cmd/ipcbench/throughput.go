package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/forwardbench"
	"github.com/ipclab/logagg/internal/bench/peers"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

func init() {
	register(&command{name: throughput.Kind, summary: "N producers → the real aggregator → file: records/s, loss, CPU per record", run: runThroughput})
}

const cpusUsage = "where processes run: any (the scheduler decides), same (producers and daemon pinned to CPU 0) or split (producers on CPU 0, daemon on CPU 1)"

func runThroughput(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(throughput.Kind, flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp,fifo,shm,mq", "100,1024")
	var o throughput.Options
	bench.CountsVar(fs, &o.Producers, "producers", []int{1, 4}, "comma-separated producer `counts`")
	buffers := fs.String("buffer", "0", "comma-separated producer write buffer sizes (0 = one write per record)")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "how long producers send in each cell")
	bench.CountVar(fs, &o.Rate, "rate", 0, "`N` records/s per producer (0 = as fast as possible)")
	fs.StringVar(&o.Format, "format", "json", "record format: json, raw, rfc3164, rfc5424")
	fs.StringVar(&o.Output, "output", throughput.OutputFile, "where the aggregator writes: file (every record accounted for by sequence number; direct I/O, the default), buffered (the file through the page cache, --direct-io=false) or null (/dev/null; counts from its metrics: ingestion without any output cost)")
	fs.StringVar(&o.CPUs, "cpus", "any", cpusUsage)
	bench.CountVar(fs, &o.Runs, "runs", 1, "measure the whole grid `N` times, one pass after another, and report each cell's median run by records/s")
	forward := fs.String("forward", "", "also forward to a sink and measure it: kafka")
	fs.StringVar(&o.Config, "config", "", "run the aggregator with this configuration `file` (outputs, rules); {dir} in it becomes each cell's directory")
	fs.BoolVar(&o.Ack, "ack", false, "unixsock and tcp producers in the acknowledged mode (producer --ack): records count once the aggregator acknowledged them as written")
	brokers := fs.String("brokers", os.Getenv("LOGAGG_KAFKA_BROKERS"), "Kafka `brokers` for --forward kafka (default $LOGAGG_KAFKA_BROKERS)")
	vs := fs.String("vs", "rsyslog", "also run `rsyslog` in every cell of the transports it takes (unixsock, tcp, unixgram, udp), right after ours, and set our producers' CPU per record and peak RSS against its; none to skip")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Quick {
		o.Duration = time.Second
	}
	var err error
	if *forward != "" {
		if *forward != "kafka" {
			return fmt.Errorf("--forward %q: only kafka is supported", *forward)
		}
		if *brokers == "" {
			return fmt.Errorf("--forward kafka needs --brokers or $LOGAGG_KAFKA_BROKERS (scripts/kafka.sh start prints one)")
		}
		return runThroughputForward(ctx, &c, *brokers, o)
	}
	if o.Buffers, err = bench.ParseSizes(*buffers); err != nil {
		return err
	}
	o.Transports, o.Sizes = c.Transports, c.Sizes
	if err := o.Validate(); err != nil {
		return err
	}
	if o.AggregatorBin, o.ProducerBin, err = workloadBinaries(); err != nil {
		return err
	}
	switch *vs {
	case "rsyslog":
		if !o.Ack && o.Config == "" {
			o.Reference = peers.Rsyslog{}
		}
	case "none", "":
	default:
		return fmt.Errorf("--vs %q: want rsyslog or none", *vs)
	}
	o.Progress = bench.NewProgress(os.Stderr, int64(len(o.Transports)*len(o.Sizes)*len(o.Producers)*len(o.Buffers)*o.Runs), c.ProgressEnabled())
	res, err := throughput.Run(ctx, o)
	o.Progress.Done()
	if err != nil {
		return err
	}
	return publish(&c, throughput.Kind, res.Params, res.Rows, res.Notes, throughput.Tables(res.Rows))
}

// runThroughputForward runs the forward kind (package forwardbench) with
// the throughput flags that apply to it: transports, sizes, producers,
// duration, rate and format.
func runThroughputForward(ctx context.Context, c *bench.Common, brokers string, o throughput.Options) error {
	f := forwardbench.Options{Transports: c.Transports, Sizes: c.Sizes, Producers: o.Producers,
		Duration: o.Duration, Rate: o.Rate, Format: o.Format}
	if brokers != "" {
		f.Brokers = strings.Split(brokers, ",")
	}
	var err error
	if f.AggregatorBin, f.ProducerBin, err = workloadBinaries(); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	f.Progress = bench.NewProgress(os.Stderr, int64(len(f.Sizes)*len(f.Producers)), c.ProgressEnabled())
	res, err := forwardbench.Run(ctx, f)
	f.Progress.Done()
	if err != nil {
		return err
	}
	return publish(c, forwardbench.Kind, res.Params, res.Rows, res.Notes, forwardbench.Tables(res.Rows))
}
