package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

func init() {
	register(&command{name: "throughput", summary: "N producers → the real aggregator → file: records/s, loss, CPU per record", run: runThroughput})
}

// throughputParams are the grid of one throughput run, saved in the result.
type throughputParams struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Producers  []int    `json:"producers"`
	Buffers    []int    `json:"buffers"`
	Duration   string   `json:"duration"`
	Rate       int      `json:"rate"`
	Format     string   `json:"format"`
	Output     string   `json:"output"` // file, buffered or null
	CPUs       string   `json:"cpus"`   // any, same or split
	Runs       int      `json:"runs"`
	Ack        bool     `json:"ack,omitempty"` // unixsock and tcp producers in the acknowledged mode
}

const cpusUsage = "where processes run: any (the scheduler decides), same (producers and daemon pinned to CPU 0) or split (producers on CPU 0, daemon on CPU 1)"

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := bench.ParseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

func runThroughput(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("throughput", flag.ContinueOnError)
	var c bench.Common
	c.Register(fs, "unixsock,tcp,unixgram,udp,fifo,shm,mq", "100,1024")
	producers := fs.String("producers", "1,4", "comma-separated producer counts")
	buffers := fs.String("buffer", "0", "comma-separated producer write buffer sizes (0 = one write per record)")
	dur := fs.Duration("duration", 5*time.Second, "how long producers send in each cell")
	rate := fs.Int("rate", 0, "records/s per producer (0 = as fast as possible)")
	format := fs.String("format", "json", "record format: json, raw, rfc3164, rfc5424")
	output := fs.String("output", "file", "where the aggregator writes: file (every record accounted for by sequence number; direct I/O, the default), buffered (the file through the page cache, --direct-io=false) or null (/dev/null; counts from its metrics: ingestion without any output cost)")
	cpus := fs.String("cpus", "any", cpusUsage)
	runs := fs.Int("runs", 1, "measure the whole grid this many times, one pass after another, and report each cell's median run by records/s")
	forward := fs.String("forward", "", "also forward to a sink and measure it: kafka")
	ack := fs.Bool("ack", false, "unixsock and tcp producers in the acknowledged mode (producer --ack): records count once the aggregator acknowledged them as written")
	brokers := fs.String("brokers", os.Getenv("LOGAGG_KAFKA_BROKERS"), "Kafka `brokers` for --forward kafka (default $LOGAGG_KAFKA_BROKERS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *forward != "" {
		if *forward != "kafka" {
			return fmt.Errorf("--forward %q: only kafka is supported", *forward)
		}
		if *brokers == "" {
			return fmt.Errorf("--forward kafka needs --brokers or $LOGAGG_KAFKA_BROKERS (scripts/kafka.sh start prints one)")
		}
		return runThroughputForward(ctx, &c, strings.Split(*brokers, ","), *dur, *rate, *format, *producers)
	}
	var aggArgs []string
	switch *output {
	case "file", "null":
	case "buffered":
		aggArgs = []string{"--direct-io=false"}
	default:
		return fmt.Errorf("--output %q: want file, buffered or null", *output)
	}
	if err := throughput.ValidCPUs(*cpus); err != nil {
		return err
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", *runs)
	}
	p := throughputParams{Transports: c.Transports, Sizes: c.Sizes, Duration: dur.String(), Rate: *rate, Format: *format, Output: *output, CPUs: *cpus, Runs: *runs, Ack: *ack}
	var err error
	if p.Producers, err = intList(*producers); err != nil {
		return err
	}
	if p.Buffers, err = intList(*buffers); err != nil {
		return err
	}
	if c.Quick {
		*dur = time.Second
		p.Duration = dur.String()
	}
	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	res := bench.NewResult("throughput", p)
	res.Notes = append(res.Notes, fmt.Sprintf("net.unix.max_dgram_qlen=%d: unix datagram senders block when 10 datagrams are queued", res.Host.MaxDgramQlen))
	if *ack {
		res.Notes = append(res.Notes, "--ack: unixsock and tcp producers ran in the acknowledged mode (sent = records handed to the kernel; each waits for the aggregator's acknowledgements at exit)")
	}
	if *output == "null" {
		res.Notes = append(res.Notes, "--output null: the aggregator wrote to /dev/null; written = its records_out_total, so duplicates and reordering are not checked")
	}
	// Each pass measures every cell once, so repeated cells are spread
	// over the whole run (the machine's noise hits all transports alike)
	// rather than measured back to back.
	type cell struct {
		t            string
		size, n, buf int
		passes       []*throughput.Result
	}
	var cells []*cell
	for _, t := range p.Transports {
		for _, size := range p.Sizes {
			for _, n := range p.Producers {
				for _, buf := range p.Buffers {
					cells = append(cells, &cell{t: t, size: size, n: n, buf: buf})
				}
			}
		}
	}
	bar := bench.NewProgress(os.Stderr, int64(len(cells)**runs), c.ProgressEnabled())
	for pass := range *runs {
		for _, cl := range cells {
			dir, err := os.MkdirTemp("", "lgtp")
			if err != nil {
				return err
			}
			r, err := throughput.Run(ctx, throughput.Spec{
				AggregatorBin: agg, ProducerBin: prod, Dir: dir, Transports: []string{cl.t},
				Producers: cl.n, Size: cl.size, Duration: *dur, Rate: *rate, Buffer: cl.buf, Format: *format,
				DiscardOutput: *output == "null", CPUs: *cpus, ExtraArgs: aggArgs, Ack: *ack,
			})
			os.RemoveAll(dir)
			bar.SetLabel(fmt.Sprintf("%s %dB x%d", cl.t, cl.size, cl.n))
			bar.Add(1)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				res.Notes = append(res.Notes, fmt.Sprintf("pass %d: %s size=%d producers=%d buffer=%d: %v", pass+1, cl.t, cl.size, cl.n, cl.buf, err))
				if r == nil {
					continue
				}
			}
			cl.passes = append(cl.passes, r)
		}
	}
	var rows []throughput.Row
	var runsKept []*throughput.Result
	for _, cl := range cells {
		if r := throughput.MedianRun(cl.passes); r != nil {
			rows = append(rows, r.Rows...)
			for range r.Rows {
				runsKept = append(runsKept, r)
			}
		}
	}
	if *runs > 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("each row is the median of %d passes by records/s (its other columns come from that pass)", *runs))
	}
	bar.Done()
	res.Rows = throughputRows(rows, runsKept)
	return finish(&c, res, throughputTable(rows, runsKept))
}

// throughputRow is a Row with the aggregator-wide figures of its run.
type throughputRow struct {
	throughput.Row
	AggCPUNs      float64 `json:"aggregator_cpu_ns_per_record"`
	AggPeakRSSKiB int64   `json:"aggregator_peak_rss_kib"`
	// VsUnixsock is records/s over the unixsock row of the same cell (0:
	// none, or this is it).
	VsUnixsock float64 `json:"vs_unixsock,omitempty"`
}

func throughputRows(rows []throughput.Row, runs []*throughput.Result) []throughputRow {
	out := make([]throughputRow, len(rows))
	vs := throughput.VsBaseline(rows)
	for i, r := range rows {
		out[i] = throughputRow{Row: r, AggCPUNs: runs[i].AggCPUNs, AggPeakRSSKiB: runs[i].AggPeakRSSKiB, VsUnixsock: vs[i]}
	}
	return out
}

func throughputTable(rows []throughput.Row, runs []*throughput.Result) *bench.Table {
	t := &bench.Table{Header: []string{"transport", "prods", "size", "buffer", "sent", "written", "lost", "dup", "reord", "kdrops", "records/s", "x unixsock", "MB/s", "recv/offered", "agg ns/rec", "prod ns/rec", "agg RSS MiB"}}
	vs := throughput.VsBaseline(rows)
	for i, r := range rows {
		t.Add(r.Transport, r.Producers, r.Size, r.Buffer, r.Sent, r.Written, r.Lost, r.Duplicated, r.Reordered, r.KernelDrops,
			strconv.FormatFloat(r.RecordsPerS, 'f', 0, 64), throughput.FormatVs(vs[i]), fmt.Sprintf("%.1f", r.MBPerS), fmt.Sprintf("%.4f", r.Offered),
			fmt.Sprintf("%.0f", runs[i].AggCPUNs), fmt.Sprintf("%.0f", r.ProdCPUNs), fmt.Sprintf("%.1f", float64(runs[i].AggPeakRSSKiB)/1024))
	}
	return t
}

// runThroughputForward measures the Kafka forwarder under the throughput
// load: forwarded records/s, lag, ack latency and the aggregator's CPU per
// record with and without forwarding.
func runThroughputForward(ctx context.Context, c *bench.Common, brokers []string, dur time.Duration, rate int, format, producers string) error {
	if c.Quick {
		dur = time.Second
	}
	counts, err := intList(producers)
	if err != nil {
		return err
	}
	agg, prod, err := workloadBinaries()
	if err != nil {
		return err
	}
	res := bench.NewResult("throughput-forward", map[string]any{"transports": c.Transports, "sizes": c.Sizes,
		"producers": counts, "duration": dur.String(), "rate": rate, "brokers": brokers})
	var rows []*throughput.ForwardResult
	for _, size := range c.Sizes {
		for _, n := range counts {
			dir, err := os.MkdirTemp("", "lgfw")
			if err != nil {
				return err
			}
			r, err := throughput.RunForward(ctx, throughput.ForwardSpec{
				Spec: throughput.Spec{AggregatorBin: agg, ProducerBin: prod, Dir: dir, Transports: c.Transports,
					Producers: n, Size: size, Duration: dur, Rate: rate, Format: format},
				Brokers: brokers, Baseline: true,
			})
			os.RemoveAll(dir)
			if err != nil {
				return err
			}
			throughput.ForwardTable(os.Stdout, r)
			rows = append(rows, r)
		}
	}
	res.Rows = rows
	if c.JSONPath != "" {
		return res.WriteJSON(c.JSONPath)
	}
	return nil
}
