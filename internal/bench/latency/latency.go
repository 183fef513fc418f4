package latency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ipclab/logagg/internal/bench"
)

// Modes.
const (
	ModeRaw        = "raw"        // transport to transport, with an echo process
	ModeAggregator = "aggregator" // producer -> aggregator -> output file
)

// RawTransports are the transports raw mode knows, in default order.
var RawTransports = []string{"unixsock", "tcp", "udp", "unixgram", "fifo"}

// AggregatorTransports are the transports aggregator mode knows.
var AggregatorTransports = []string{"unixsock", "tcp", "udp", "unixgram", "fifo"}

// ErrBadOptions is returned (wrapped) for invalid Options.
var ErrBadOptions = errors.New("bad latency options")

// Options configure Run. Zero values take the defaults named on each field;
// with Quick set, the quick defaults instead.
type Options struct {
	Modes      []string      // default {ModeRaw}, plus ModeAggregator when AggregatorBin is set
	Transports []string      // default RawTransports
	Size       int           // payload (raw) or record (aggregator) bytes; default 4096
	Rate       int           // messages per second; default 20000 (quick 2000)
	Duration   time.Duration // measured sending time; default 5s (quick 1s)
	Warmup     time.Duration // sending time excluded first; default 1s (quick 100ms)
	Quick      bool
	// Ack sends aggregator-mode unix stream and TCP rows in the
	// acknowledged mode (client.WithAck).
	Ack bool
	// AggregatorBin is the aggregator binary aggregator mode starts.
	AggregatorBin string
	// Exe and EchoArgs start the raw mode echo side: Exe EchoArgs... flags.
	// Defaults: /proc/self/exe and {EchoSubcommand}.
	Exe      string
	EchoArgs []string
	// Dir holds sockets, FIFOs and the aggregator's output; default a new
	// temporary directory, removed at the end.
	Dir      string
	Progress *bench.Progress
	// Stderr, if set, receives the aggregator's log lines.
	Stderr io.Writer
}

// Params is what a Result records about the run.
type Params struct {
	Modes      []string `json:"modes"`
	Transports []string `json:"transports"`
	Size       int      `json:"size"`
	Rate       int      `json:"rate"`
	DurationNs int64    `json:"duration_ns"`
	WarmupNs   int64    `json:"warmup_ns"`
	Quick      bool     `json:"quick"`
	Ack        bool     `json:"ack,omitempty"`
	// IntervalNs is the expected interval given to RecordCorrectedValue.
	IntervalNs int64 `json:"interval_ns"`
}

// Point is one point of a percentile curve: Percentile in 0..100.
type Point struct {
	Percentile float64 `json:"percentile"`
	Ns         int64   `json:"ns"`
}

// Dist is one latency distribution, in nanoseconds. The percentile fields
// come from the coordinated-omission corrected histogram; Raw* from the
// uncorrected one.
type Dist struct {
	CorrectedCount int64   `json:"corrected_count"`
	Mean           float64 `json:"mean"`
	P50            float64 `json:"p50"`
	P99            float64 `json:"p99"`
	P999           float64 `json:"p99_9"`
	P9999          float64 `json:"p99_99"`
	P99999         float64 `json:"p99_999"`
	Max            float64 `json:"max"`
	RawCount       int64   `json:"raw_count"`
	RawMean        float64 `json:"raw_mean"`
	RawP99         float64 `json:"raw_p99"`
	RawMax         float64 `json:"raw_max"`
	// Percentiles is the corrected distribution at CurvePercentiles, for
	// plotting percentile curves.
	Percentiles []Point `json:"percentiles"`
}

// CurvePercentiles are the points of Dist.Percentiles.
var CurvePercentiles = []float64{0, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99, 99.995, 99.999, 100}

// Row is one transport in one mode.
type Row struct {
	Mode      string `json:"mode"`
	Transport string `json:"transport"`
	Size      int    `json:"size"`
	Rate      int    `json:"rate"`
	Warmup    int    `json:"warmup_messages"`
	// Sent is the number of measured messages sent (warm-up excluded).
	Sent int `json:"sent"`
	// Measured is the number of one-way latencies recorded (uncorrected):
	// Sent minus Lost.
	Measured int64 `json:"measured"`
	Lost     int   `json:"lost"`
	// ElapsedNs runs from the first measured message sent to the last one
	// received (seed 002's "It took X ms").
	ElapsedNs int64 `json:"elapsed_ns"`
	// AchievedRate is measured messages sent per second of sending.
	AchievedRate float64 `json:"achieved_rate"`
	// LateSends counts sends that left more than one interval after their
	// due time (the sender itself could not keep the rate).
	LateSends int   `json:"late_sends"`
	OneWay    Dist  `json:"one_way"`
	RoundTrip *Dist `json:"round_trip,omitempty"`
	// Notes says how this row was measured where it matters (tailer
	// resolution, datagram queue limits).
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Report is what Run returns.
type Report struct {
	Params Params
	Rows   []Row
	Notes  []string
}

func (o *Options) fill() error {
	if o.Size == 0 {
		o.Size = 4096
	}
	if o.Rate == 0 {
		o.Rate = 20000
		if o.Quick {
			o.Rate = 2000
		}
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
		if o.Quick {
			o.Duration = time.Second
		}
	}
	if o.Warmup == 0 {
		o.Warmup = time.Second
		if o.Quick {
			o.Warmup = 100 * time.Millisecond
		}
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{ModeRaw}
		if o.AggregatorBin != "" {
			o.Modes = append(o.Modes, ModeAggregator)
		}
	}
	if len(o.Transports) == 0 {
		o.Transports = RawTransports
	}
	if o.Exe == "" {
		o.Exe = "/proc/self/exe"
	}
	if o.EchoArgs == nil {
		o.EchoArgs = []string{EchoSubcommand}
	}
	switch {
	case o.Size < minPayload:
		return fmt.Errorf("%w: size %d below %d bytes (the payload carries two timestamps and a sequence number)", ErrBadOptions, o.Size, minPayload)
	case o.Size > 60000:
		return fmt.Errorf("%w: size %d above 60000 (one UDP datagram)", ErrBadOptions, o.Size)
	case o.Rate < 1 || o.Rate > 1_000_000:
		return fmt.Errorf("%w: rate %d outside 1..1000000", ErrBadOptions, o.Rate)
	case o.Duration < 0 || o.Warmup < 0:
		return fmt.Errorf("%w: negative duration", ErrBadOptions)
	}
	for _, m := range o.Modes {
		if m != ModeRaw && m != ModeAggregator {
			return fmt.Errorf("%w: unknown mode %q (raw, aggregator)", ErrBadOptions, m)
		}
		if m == ModeAggregator && o.AggregatorBin == "" {
			return fmt.Errorf("%w: aggregator mode needs the aggregator binary", ErrBadOptions)
		}
	}
	for _, t := range o.Transports {
		if !slices.Contains(RawTransports, t) && !slices.Contains(AggregatorTransports, t) {
			return fmt.Errorf("%w: unknown transport %q (known: %s)", ErrBadOptions, t, strings.Join(RawTransports, ","))
		}
	}
	return nil
}

// Counts returns the warm-up and measured message counts per row, with
// the defaults applied (for sizing a progress bar).
func (o *Options) Counts() (warm, measured int) {
	c := *o
	_ = c.fill()
	return c.counts()
}

func (o *Options) interval() int64 { return int64(time.Second) / int64(o.Rate) }

// counts returns the warm-up and measured message counts.
func (o *Options) counts() (warm, measured int) {
	return int(o.Warmup.Seconds() * float64(o.Rate)), int(o.Duration.Seconds() * float64(o.Rate))
}

// Run measures every mode × transport and returns the rows. A row that
// cannot be measured carries Error; Run itself fails only on bad options or
// a cancelled context.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	rep := &Report{Params: Params{Modes: o.Modes, Transports: o.Transports, Size: o.Size, Rate: o.Rate,
		DurationNs: int64(o.Duration), WarmupNs: int64(o.Warmup), Quick: o.Quick, Ack: o.Ack, IntervalNs: o.interval()}}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "lglat")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	if q, err := os.ReadFile("/proc/sys/net/unix/max_dgram_qlen"); err == nil {
		rep.Notes = append(rep.Notes, "net.unix.max_dgram_qlen = "+strings.TrimSpace(string(q))+" (unixgram rows)")
	}
	for _, mode := range o.Modes {
		for _, t := range o.Transports {
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			o.Progress.SetLabel(mode + " " + t)
			var row Row
			var err error
			switch mode {
			case ModeRaw:
				row, err = measureRaw(ctx, &o, t, dir)
			case ModeAggregator:
				row, err = measureAggregator(ctx, &o, t, dir)
			}
			row.Mode, row.Transport, row.Size, row.Rate = mode, t, o.Size, o.Rate
			if err != nil {
				row.Error = err.Error()
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s %s: %v", mode, t, err))
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	return rep, nil
}

// recorder holds one goroutine's histograms for one distribution.
type recorder struct {
	corrected, raw *hdrhistogram.Histogram
	interval       int64
}

// maxTrackable is 60 s in ns: anything slower is a failed run, not a tail.
const maxTrackable = 60_000_000_000

func newRecorder(interval int64) *recorder {
	return &recorder{
		corrected: hdrhistogram.New(1, maxTrackable, 3),
		raw:       hdrhistogram.New(1, maxTrackable, 3),
		interval:  interval,
	}
}

func (r *recorder) record(ns int64) {
	ns = min(max(ns, 1), maxTrackable)
	// Errors only for values outside the trackable range, clamped above.
	_ = r.corrected.RecordCorrectedValue(ns, r.interval)
	_ = r.raw.RecordValue(ns)
}

func (r *recorder) dist() Dist {
	c := r.corrected
	d := Dist{
		CorrectedCount: c.TotalCount(),
		Mean:           c.Mean(),
		P50:            float64(c.ValueAtQuantile(50)),
		P99:            float64(c.ValueAtQuantile(99)),
		P999:           float64(c.ValueAtQuantile(99.9)),
		P9999:          float64(c.ValueAtQuantile(99.99)),
		P99999:         float64(c.ValueAtQuantile(99.999)),
		Max:            float64(c.Max()),
		RawCount:       r.raw.TotalCount(),
		RawMean:        r.raw.Mean(),
		RawP99:         float64(r.raw.ValueAtQuantile(99)),
		RawMax:         float64(r.raw.Max()),
	}
	if d.CorrectedCount == 0 {
		return Dist{Percentiles: []Point{}}
	}
	for _, p := range CurvePercentiles {
		d.Percentiles = append(d.Percentiles, Point{Percentile: p, Ns: c.ValueAtQuantile(p)})
	}
	return d
}
