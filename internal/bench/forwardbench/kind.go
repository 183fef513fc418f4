package forwardbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Kind is the result kind of `ipcbench throughput --forward kafka`. The
// name predates this package and is kept, so that results saved before
// still route to it in the report.
const Kind = "throughput-forward"

// ErrBadOptions is returned (wrapped) by Options.Validate and Measure.
var ErrBadOptions = errors.New("bad forward options")

// Options are the grid of one forward run: every record size × producer
// count, each cell with Producers producers on every transport of
// Transports at once, into one aggregator forwarding to Brokers.
type Options struct {
	AggregatorBin, ProducerBin string
	// Brokers are the Kafka bootstrap brokers (host:port); a topic of
	// its own per cell is auto-created by the broker.
	Brokers    []string
	Transports []string
	Sizes      []int // record sizes in bytes
	Producers  []int // producer counts per transport
	Duration   time.Duration
	Rate       int    // records/s per producer, 0 = flat out
	Format     string // record format: json (default), raw, rfc3164, rfc5424
	// Progress, optional, counts cells.
	Progress *bench.Progress
}

// Validate names the first bad field.
func (o *Options) Validate() error {
	switch {
	case len(o.Brokers) == 0:
		return fmt.Errorf("%w: brokers: none (Kafka's host:port; scripts/kafka.sh start prints one)", ErrBadOptions)
	case o.AggregatorBin == "" || o.ProducerBin == "":
		return fmt.Errorf("%w: the aggregator and producer binaries are required", ErrBadOptions)
	case len(o.Transports) == 0:
		return fmt.Errorf("%w: transports: none", ErrBadOptions)
	case len(o.Sizes) == 0:
		return fmt.Errorf("%w: sizes: none", ErrBadOptions)
	case len(o.Producers) == 0:
		return fmt.Errorf("%w: producers: none", ErrBadOptions)
	case o.Duration <= 0:
		return fmt.Errorf("%w: duration %v: want more than 0", ErrBadOptions, o.Duration)
	case o.Rate < 0:
		return fmt.Errorf("%w: rate %d: want 0 (flat out) or more", ErrBadOptions, o.Rate)
	}
	for _, b := range o.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			return fmt.Errorf("%w: broker %q: want host:port", ErrBadOptions, b)
		}
	}
	for _, s := range o.Sizes {
		if s < 1 {
			return fmt.Errorf("%w: size %d: want at least 1", ErrBadOptions, s)
		}
	}
	for _, n := range o.Producers {
		if n < 1 {
			return fmt.Errorf("%w: producers %d: want at least 1", ErrBadOptions, n)
		}
	}
	return nil
}

// Params are the Options saved in the result (the keys results had before
// this package).
type Params struct {
	Transports []string `json:"transports"`
	Sizes      []int    `json:"sizes"`
	Producers  []int    `json:"producers"`
	Duration   string   `json:"duration"`
	Rate       int      `json:"rate"`
	Brokers    []string `json:"brokers"`
}

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// Run measures every cell of the grid, each with a baseline run without
// forwarding (Spec.Baseline). A cell that fails (a forwarder that did not
// drain within Spec.DrainLimit, a broker that went away) ends the run with
// its error; throughput's grid notes such a cell and goes on, this one
// never did.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Params: Params{Transports: o.Transports, Sizes: o.Sizes, Producers: o.Producers,
		Duration: o.Duration.String(), Rate: o.Rate, Brokers: o.Brokers}}
	for _, size := range o.Sizes {
		for _, n := range o.Producers {
			dir, err := os.MkdirTemp("", "lgfw")
			if err != nil {
				return nil, err
			}
			o.Progress.SetLabel(fmt.Sprintf("%dB x%d", size, n))
			r, err := Measure(ctx, Spec{
				Spec: throughput.Spec{AggregatorBin: o.AggregatorBin, ProducerBin: o.ProducerBin, Dir: dir, Transports: o.Transports,
					Producers: n, Size: size, Duration: o.Duration, Rate: o.Rate, Format: o.Format},
				Brokers: o.Brokers, Baseline: true,
			})
			os.RemoveAll(dir)
			o.Progress.Add(1)
			if err != nil {
				return nil, fmt.Errorf("size %d, %d producers: %w", size, n, err)
			}
			res.Rows = append(res.Rows, *r)
		}
	}
	return res, nil
}

// Tables is the forward kind's tables: the local accounting of every load
// (throughput.Tables), then one line per load for the forwarder.
func Tables(rows []Row) []bench.TitledTable {
	var load []throughput.Row
	fwd := &bench.Table{Header: []string{"size", "prods", "written", "produced", "records/s", "peak rec/s", "MB/s", "max lag rec",
		"max lag B", "max in flight", "drain s", "ack p50", "ack p99", "errors", "retries", "agg ns/rec", "no-fwd ns/rec", "fwd ns/rec"}}
	for _, r := range rows {
		size, prods := "-", "-"
		if r.Load != nil {
			load = append(load, r.Load.Rows...)
			if len(r.Load.Rows) > 0 {
				size, prods = bench.FormatSize(r.Load.Rows[0].Size), strconv.Itoa(r.Load.Rows[0].Producers)
			}
		}
		base, own := "-", "-" // without a baseline run the forwarder's share is unknown
		if r.Baseline != nil {
			base, own = fmt.Sprintf("%.0f", r.BaseCPUNs), fmt.Sprintf("%.0f", r.FwdCPUNs)
		}
		fwd.Add(size, prods, r.Written, r.Produced, fmt.Sprintf("%.0f", r.RecordsPerS), fmt.Sprintf("%.0f", r.PeakRecordsPerS),
			fmt.Sprintf("%.1f", r.MBPerS), fmt.Sprintf("%.0f", r.MaxLagRecords), fmt.Sprintf("%.0f", r.MaxLagBytes),
			fmt.Sprintf("%.0f", r.MaxLagGauge), fmt.Sprintf("%.2f", r.DrainS), fmtSeconds(r.AckP50S), fmtSeconds(r.AckP99S),
			r.Errors, r.Retries, fmt.Sprintf("%.0f", r.AggCPUNs), base, own)
	}
	return append(throughput.Tables(load), bench.TitledTable{
		Title: "the Kafka forwarder: acknowledged records/s, lag, ack latency, and the whole aggregator's CPU per record with and without forwarding",
		Table: fwd})
}

func fmtSeconds(s float64) string {
	switch {
	case s == 0:
		return "-"
	case s >= 1:
		return fmt.Sprintf("%.1fs", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.1fms", s*1e3)
	}
	return fmt.Sprintf("%.0fµs", s*1e6)
}
