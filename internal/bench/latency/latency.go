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
	Sizes      []int         // payload (raw) or record (aggregator) bytes, a row each; default {4096}
	Rate       int           // messages per second; default 20000 (quick 2000)
	Duration   time.Duration // measured sending time; default 5s (quick 1s)
	Warmup     time.Duration // sending time excluded first; default 1s (quick 100ms)
	Quick      bool
	// Placements of the raw rows' sender, echo and receiver threads:
	// PlaceSame, PlaceCross, PlaceUnpinned, a row each. Default same and
	// cross (same alone, with a note, when only one CPU is allowed).
	// Aggregator rows are measured once, unpinned.
	Placements []string
	// CPUs the placements use: the first for the sender (and the echo
	// and the receiver in "same"), the second for the echo and the
	// receiver in "cross".
	// Default: the CPUs this thread may run on.
	CPUs []int
	// Pacing is how the sender waits for each scheduled send time:
	// PacingSpin (default) or PacingSleep.
	Pacing string
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
	Sizes      []int    `json:"sizes"`
	Rate       int      `json:"rate"`
	DurationNs int64    `json:"duration_ns"`
	WarmupNs   int64    `json:"warmup_ns"`
	Quick      bool     `json:"quick"`
	Ack        bool     `json:"ack,omitempty"`
	// Placements and CPUs as Options has them (results written before
	// placements existed have neither: their raw rows ran unpinned).
	Placements []string `json:"placements,omitempty"`
	CPUs       []int    `json:"cpus,omitempty"`
	// Pacing is how the sender waited (results without it slept until
	// each due time: PacingSleep).
	Pacing string `json:"pacing,omitempty"`
	// IntervalNs is the send interval, 1e9/Rate.
	IntervalNs int64 `json:"interval_ns"`
	// Method says how latency was measured (MethodScheduled); results
	// without it were measured by the old method (send-time stamps with
	// coordinated-omission correction on top, see docs/adr/).
	Method string `json:"method,omitempty"`
}

// MethodScheduled is the latency method of this package (Params.Method).
const MethodScheduled = "scheduled"

// Point is one point of a percentile curve: Percentile in 0..100, and
// Beyond, the number of observations above it (see bench.Beyond); a
// point with fewer than bench.MinTail beyond it is not an estimate.
type Point struct {
	Percentile float64 `json:"percentile"`
	Ns         int64   `json:"ns"`
	Beyond     int64   `json:"beyond"`
}

// Dist is one latency distribution, in nanoseconds, of Count observations,
// each recorded once (no coordinated-omission correction: the latency is
// measured from the scheduled send time, see the package doc).
type Dist struct {
	Count  int64   `json:"count"`
	Mean   float64 `json:"mean"`
	P50    float64 `json:"p50"`
	P99    float64 `json:"p99"`
	P999   float64 `json:"p99_9"`
	P9999  float64 `json:"p99_99"`
	P99999 float64 `json:"p99_999"`
	Max    float64 `json:"max"`
	// Percentiles is the distribution at CurvePercentiles, for plotting
	// percentile curves.
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
	// Placement is PlaceSame, PlaceCross or PlaceUnpinned ("" in results
	// written before placements: unpinned), and Sender, Echo and Receiver
	// where each thread was pinned and seen running. Aggregator rows have
	// no Echo (the aggregator is the far side) and their receiver is the
	// tailer of the output file.
	Placement string `json:"placement,omitempty"`
	Sender    *Side  `json:"sender,omitempty"`
	Echo      *Side  `json:"echo,omitempty"`
	Receiver  *Side  `json:"receiver,omitempty"`
	Warmup    int    `json:"warmup_messages"`
	// Sent is the number of measured messages sent (warm-up excluded).
	Sent int `json:"sent"`
	// Measured is the number of one-way latencies recorded: Sent minus
	// Lost.
	Measured int64 `json:"measured"`
	Lost     int   `json:"lost"`
	// ElapsedNs runs from the first measured message's scheduled send
	// time to the last one received (seed 002's "It took X ms").
	ElapsedNs int64 `json:"elapsed_ns"`
	// AchievedRate is measured messages sent per second of sending.
	AchievedRate float64 `json:"achieved_rate"`
	// LateSends counts sends that left more than one interval after their
	// scheduled time (the sender itself could not keep the rate); their
	// delay is part of their latency. MaxSendLagNs is the largest such
	// delay.
	LateSends    int   `json:"late_sends"`
	MaxSendLagNs int64 `json:"max_send_lag_ns"`
	// SendLag is the sender's lateness, actual send time minus scheduled,
	// of every measured message: the part of every latency that is the
	// instrument's, not the transport's (nil in older results).
	SendLag *Dist `json:"send_lag,omitempty"`
	// SenderCPUNs is the sending thread's CPU time over the row and
	// PacingCPUNs the part of it spent spinning for due times (an
	// estimate; see pacer): the sender's own work is the difference.
	SenderCPUNs int64 `json:"sender_cpu_ns,omitempty"`
	PacingCPUNs int64 `json:"pacing_cpu_ns,omitempty"`
	OneWay      Dist  `json:"one_way"`
	RoundTrip   *Dist `json:"round_trip,omitempty"`
	// RoundTripFromSend is the round trip measured from the time the
	// message actually left rather than from its scheduled time: what a
	// tool that stamps the actual send (sockperf) reports, doubled. It
	// differs from RoundTrip by the sender's lateness.
	RoundTripFromSend *Dist `json:"round_trip_from_send,omitempty"`
	// Notes says how this row was measured where it matters (tailer
	// resolution, datagram queue limits).
	Notes []string `json:"notes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// Kind is the subcommand and result kind of fixed-rate latency.
const Kind = "latency"

// Result is what Run returns.
type Result struct {
	Params Params
	Rows   []Row
	Notes  []string
}

// fill applies the defaults, then Validate.
func (o *Options) fill() error {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{4096}
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
	if o.Pacing == "" {
		o.Pacing = PacingSpin
	}
	if len(o.CPUs) == 0 {
		cpus, err := allowedCPUs()
		if err != nil {
			return err
		}
		o.CPUs = cpus
	}
	return o.Validate()
}

// Validate reports the first invalid option; zero values are valid (they
// take the defaults).
func (o *Options) Validate() error {
	for _, size := range o.Sizes {
		switch {
		case size < minPayload:
			return fmt.Errorf("%w: size %d below %d bytes (the payload carries two timestamps and a sequence number)", ErrBadOptions, size, minPayload)
		case size > 60000:
			return fmt.Errorf("%w: size %d above 60000 (one UDP datagram)", ErrBadOptions, size)
		}
	}
	switch {
	case o.Rate < 0 || o.Rate > 1_000_000:
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
	for _, p := range o.Placements {
		if !slices.Contains(Placements, p) {
			return fmt.Errorf("%w: placement %q (want %s)", ErrBadOptions, p, strings.Join(Placements, ", "))
		}
	}
	if o.Pacing != "" && !slices.Contains(Pacings, o.Pacing) {
		return fmt.Errorf("%w: pacing %q (want %s)", ErrBadOptions, o.Pacing, strings.Join(Pacings, ", "))
	}
	return nil
}

// Messages returns how many messages Run sends in all, warm-up included,
// with the defaults applied (for sizing a progress bar).
func (o *Options) Messages() int64 {
	c := *o
	_ = c.fill()
	warm, measured := c.counts()
	plan, _, _ := planPlacements(c.Placements, c.CPUs)
	rows := 0
	for _, m := range c.Modes {
		if m == ModeRaw {
			rows += len(plan) * len(c.Transports)
		} else {
			rows += len(c.Transports)
		}
	}
	return int64((warm + measured) * len(c.Sizes) * rows)
}

func (o *Options) interval() int64 { return int64(time.Second) / int64(o.Rate) }

// counts returns the warm-up and measured message counts.
func (o *Options) counts() (warm, measured int) {
	return int(o.Warmup.Seconds() * float64(o.Rate)), int(o.Duration.Seconds() * float64(o.Rate))
}

// Run measures every size × mode × transport (× placement, raw rows) and
// returns the rows. A row that cannot be measured carries Error; Run
// itself fails only on bad options or a cancelled context.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.fill(); err != nil {
		return nil, err
	}
	plan, planNotes, err := planPlacements(o.Placements, o.CPUs)
	if err != nil {
		return nil, err
	}
	rep := &Result{Params: Params{Modes: o.Modes, Transports: o.Transports, Sizes: o.Sizes, Rate: o.Rate,
		DurationNs: int64(o.Duration), WarmupNs: int64(o.Warmup), Quick: o.Quick, Ack: o.Ack, IntervalNs: o.interval(),
		Method: MethodScheduled, CPUs: o.CPUs, Pacing: o.Pacing}, Notes: planNotes}
	for _, pl := range plan {
		rep.Params.Placements = append(rep.Params.Placements, pl.name)
	}
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
	if slices.Contains(o.Modes, ModeAggregator) && !(len(plan) == 1 && plan[0].name == PlaceUnpinned) {
		rep.Notes = append(rep.Notes, "aggregator rows run unpinned whatever the placement: the far side is the aggregator's own threads (pin them with `ipcbench throughput --cpus`)")
	}
	for _, size := range o.Sizes {
		for _, mode := range o.Modes {
			places := plan
			if mode == ModeAggregator {
				places = []placement{unpinned}
			}
			for _, pl := range places {
				for _, t := range o.Transports {
					if err := ctx.Err(); err != nil {
						return rep, err
					}
					label := mode + " " + t + " " + bench.FormatSize(size)
					if mode == ModeRaw {
						label += " " + pl.name
					}
					o.Progress.SetLabel(label)
					var row Row
					var err error
					switch mode {
					case ModeRaw:
						row, err = measureRaw(ctx, &o, t, size, dir, pl)
					case ModeAggregator:
						row, err = measureAggregator(ctx, &o, t, size, dir)
					}
					row.Mode, row.Transport, row.Size, row.Rate, row.Placement = mode, t, size, o.Rate, pl.name
					if err != nil {
						row.Error = err.Error()
						rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %v", label, err))
					}
					rep.Rows = append(rep.Rows, row)
				}
			}
		}
	}
	return rep, nil
}

// recorder holds one goroutine's histogram for one distribution.
type recorder struct{ h *hdrhistogram.Histogram }

// maxTrackable is 60 s in ns: anything slower is a failed run, not a tail.
const maxTrackable = 60_000_000_000

func newRecorder() *recorder { return &recorder{h: hdrhistogram.New(1, maxTrackable, 3)} }

// record records one latency once. It is never corrected for coordinated
// omission: every latency is measured from its message's scheduled send
// time, so a stall (of the sender, the transport or the receiver) is
// already in the latencies of the messages that were due during it, and a
// correction would count those messages a second time.
func (r *recorder) record(ns int64) {
	ns = min(max(ns, 1), maxTrackable)
	_ = r.h.RecordValue(ns) // errors only outside the range, clamped above
}

func (r *recorder) count() int64 { return r.h.TotalCount() }

func (r *recorder) dist() Dist {
	h := r.h
	n := h.TotalCount()
	if n == 0 {
		return Dist{Percentiles: []Point{}}
	}
	d := Dist{
		Count:  n,
		Mean:   h.Mean(),
		P50:    float64(h.ValueAtQuantile(50)),
		P99:    float64(h.ValueAtQuantile(99)),
		P999:   float64(h.ValueAtQuantile(99.9)),
		P9999:  float64(h.ValueAtQuantile(99.99)),
		P99999: float64(h.ValueAtQuantile(99.999)),
		Max:    float64(h.Max()),
	}
	for _, p := range CurvePercentiles {
		d.Percentiles = append(d.Percentiles, Point{Percentile: p, Ns: h.ValueAtQuantile(p), Beyond: bench.Beyond(n, p)})
	}
	return d
}
