package forwardbench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/throughput"
)

// Spec is one forwarding measurement: one cell of Run's grid.
type Spec struct {
	// Spec is the load (transports, producers, size, rate, duration) and
	// the binaries. Spec.Daemon must be nil: the aggregator is started with
	// Spec.ExtraArgs plus the forwarding flags.
	throughput.Spec
	// Brokers are the Kafka bootstrap brokers (host:port). Required.
	Brokers []string
	// Topic receives the records (default: a unique "logagg-bench-…" one,
	// auto-created by the broker).
	Topic string
	// KafkaArgs are extra aggregator flags for the forwarder, e.g.
	// "--kafka-compression", "zstd" or "--kafka-linger", "20ms".
	KafkaArgs []string
	// Baseline also runs the load without forwarding (in Dir/b) to
	// subtract the aggregator's own CPU per record.
	Baseline bool
	// Sample is the metrics sampling period (default 100ms).
	Sample time.Duration
	// DrainLimit bounds the wait for lag 0 after the producers end
	// (default 60s); a run that does not drain returns an error.
	DrainLimit time.Duration
}

// LagSample is one reading of the forwarder's metrics.
type LagSample struct {
	T          float64 `json:"t_s"` // since the aggregator was ready
	Written    float64 `json:"written"`
	Produced   float64 `json:"produced"`
	LagRecords float64 `json:"lag_records"`
	LagBytes   float64 `json:"lag_bytes"`
}

// Row is what forwarding achieved under one load (one Spec).
type Row struct {
	Load     *throughput.Measurement `json:"load"`               // the forwarding run's local accounting
	Baseline *throughput.Measurement `json:"baseline,omitempty"` // the same load without forwarding
	Topic    string                  `json:"topic"`
	Brokers  string                  `json:"brokers"`

	Written  int64 `json:"written"`  // records the aggregator wrote (records_out_total)
	Produced int64 `json:"produced"` // records Kafka acknowledged (records_produced_total)
	Errors   int64 `json:"errors"`   // failed produce attempts
	Retries  int64 `json:"retries"`

	// ForwardS runs from the first acknowledged record to the last;
	// RecordsPerS = Produced / ForwardS. When the forwarder keeps up this is
	// the ingest rate; DrainS (producers done → lag 0) shows when it did not.
	ForwardS    float64 `json:"forward_s"`
	RecordsPerS float64 `json:"records_per_s"`
	MBPerS      float64 `json:"mb_per_s"` // of JSON lines as produced to Kafka
	DrainS      float64 `json:"drain_s"`
	// PeakRecordsPerS is the highest rate over any 1 s window of samples.
	PeakRecordsPerS float64 `json:"peak_records_per_s"`

	// MaxLagRecords is the largest written-minus-acknowledged count seen
	// in the samples (exact to one sample period); MaxLagGauge is the
	// largest logagg_forward_kafka_lag_records (records read, not yet
	// acknowledged; refreshed once a second); MaxLagBytes likewise.
	MaxLagRecords float64 `json:"max_lag_records"`
	MaxLagGauge   float64 `json:"max_lag_records_gauge"`
	MaxLagBytes   float64 `json:"max_lag_bytes"`
	// AckP50S, AckP99S: producer send → Kafka ack latency of the stamped
	// records, from the ack_latency_seconds histogram (bucket upper bounds).
	AckP50S float64 `json:"ack_latency_p50_s"`
	AckP99S float64 `json:"ack_latency_p99_s"`

	// AggCPUNs is the WHOLE aggregator's CPU (user+sys) per written record
	// with forwarding on; BaseCPUNs the same without forwarding (Baseline);
	// FwdCPUNs = AggCPUNs - BaseCPUNs, the forwarder's share (0 without a
	// baseline).
	AggCPUNs  float64 `json:"agg_cpu_ns_per_record"`
	BaseCPUNs float64 `json:"base_cpu_ns_per_record,omitempty"`
	FwdCPUNs  float64 `json:"forward_cpu_ns_per_record,omitempty"`

	Samples []LagSample `json:"samples,omitempty"`
}

// Measure measures forwarding under one load (see the package doc). It
// returns the Row with an error when the forwarder did not drain in time.
func Measure(ctx context.Context, s Spec) (*Row, error) {
	if len(s.Brokers) == 0 {
		return nil, fmt.Errorf("%w: Spec.Brokers is empty", ErrBadOptions)
	}
	if s.Daemon != nil {
		return nil, fmt.Errorf("%w: Spec runs our aggregator; leave Spec.Daemon nil", ErrBadOptions)
	}
	if s.Sample <= 0 {
		s.Sample = 100 * time.Millisecond
	}
	if s.DrainLimit <= 0 {
		s.DrainLimit = 60 * time.Second
	}
	if s.Topic == "" {
		s.Topic = fmt.Sprintf("logagg-bench-%d", time.Now().UnixNano())
	}
	res := &Row{Topic: s.Topic, Brokers: strings.Join(s.Brokers, ",")}

	if s.Baseline {
		base := s.Spec
		base.Dir = filepath.Join(s.Dir, "b")
		if err := os.MkdirAll(base.Dir, 0o755); err != nil {
			return nil, err
		}
		r, err := throughput.Measure(ctx, base)
		if err != nil {
			return nil, fmt.Errorf("baseline run: %w", err)
		}
		res.Baseline = r
		res.BaseCPUNs = r.AggCPUNs
	}

	args := append([]string{}, s.ExtraArgs...)
	args = append(args, "--forward-kafka", strings.Join(s.Brokers, ","), "--kafka-topic", s.Topic)
	args = append(args, s.KafkaArgs...)
	fd := &forwardDaemon{inner: &harness.AggregatorDaemon{Bin: s.AggregatorBin, ExtraArgs: args}, period: s.Sample, drainLimit: s.DrainLimit}
	spec := s.Spec
	spec.Daemon = fd
	load, err := throughput.Measure(ctx, spec)
	if err != nil {
		return nil, err
	}
	res.Load = load
	res.AggCPUNs = load.AggCPUNs
	if s.Baseline && res.AggCPUNs > 0 {
		res.FwdCPUNs = res.AggCPUNs - res.BaseCPUNs
	}
	fd.summarize(res)
	if res.Written > 0 && res.Produced < res.Written {
		return res, fmt.Errorf("forwarder did not drain within %v: %d of %d records acknowledged", s.DrainLimit, res.Produced, res.Written)
	}
	return res, nil
}

// forwardDaemon is the aggregator plus a metrics sampler, and a Stop that
// first waits for the forwarder to catch up.
type forwardDaemon struct {
	inner      *harness.AggregatorDaemon
	period     time.Duration
	drainLimit time.Duration
	run        *forwardRunning
}

func (f *forwardDaemon) Name() string { return "logagg+kafka" }

func (f *forwardDaemon) Start(ctx context.Context, dir string, transports []string, stderr io.Writer) (harness.Running, error) {
	r, err := f.inner.Start(ctx, dir, transports, stderr)
	if err != nil {
		return nil, err
	}
	ar := r.(*harness.RunningAggregator)
	fr := &forwardRunning{RunningAggregator: ar, url: ar.Metrics(), period: f.period, drainLimit: f.drainLimit,
		start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	f.run = fr
	go fr.sample()
	return fr, nil
}

type forwardRunning struct {
	*harness.RunningAggregator
	url        string
	period     time.Duration
	drainLimit time.Duration
	start      time.Time
	stop, done chan struct{}

	mu        sync.Mutex
	samples   []LagSample
	last      harness.Metrics
	maxGauge  float64
	maxBytes  float64
	quietAt   time.Time // when Stop was called: the producers were done
	drainedAt time.Time // when produced first reached written after that
	stopOnce  sync.Once
}

const (
	mWritten  = "logagg_records_out_total"
	mProduced = "logagg_forward_kafka_records_produced_total"
	mLag      = "logagg_forward_kafka_lag_records"
	mLagBytes = "logagg_forward_kafka_lag_bytes"
	mErrors   = "logagg_forward_kafka_errors_total"
	mRetries  = "logagg_forward_kafka_retries_total"
	mBytes    = "logagg_forward_kafka_bytes_produced_total"
	mAck      = "logagg_forward_kafka_ack_latency_seconds" // a histogram
)

// scrapeTimeout bounds one scrape of the sampler: a slow answer must not
// stall the sampling for long.
const scrapeTimeout = 2 * time.Second

func scrape(url string) (harness.Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	return harness.ScrapeMetrics(ctx, url)
}

func (r *forwardRunning) sample() {
	defer close(r.done)
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		ms, err := scrape(r.url)
		now := time.Now()
		if err == nil {
			s := LagSample{T: now.Sub(r.start).Seconds(), Written: ms.Sum(mWritten, nil), Produced: ms.Sum(mProduced, nil),
				LagRecords: ms.Sum(mLag, nil), LagBytes: ms.Sum(mLagBytes, nil)}
			r.mu.Lock()
			r.samples = append(r.samples, s)
			r.last = ms
			r.maxGauge = max(r.maxGauge, s.LagRecords)
			r.maxBytes = max(r.maxBytes, s.LagBytes)
			if !r.quietAt.IsZero() && r.drainedAt.IsZero() && s.Produced >= s.Written {
				r.drainedAt = now
			}
			r.mu.Unlock()
		}
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
	}
}

// Stop waits (up to drainLimit) until Kafka acknowledged every written
// record, then stops the sampler and the aggregator.
func (r *forwardRunning) Stop() (*os.ProcessState, error) {
	r.mu.Lock()
	r.quietAt = time.Now()
	r.mu.Unlock()
	deadline := time.Now().Add(r.drainLimit)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		drained := !r.drainedAt.IsZero()
		r.mu.Unlock()
		if drained {
			break
		}
		time.Sleep(r.period / 2)
	}
	r.stopOnce.Do(func() { close(r.stop) })
	<-r.done
	return r.RunningAggregator.Stop()
}

func (f *forwardDaemon) summarize(res *Row) {
	r := f.run
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res.Samples = r.samples
	res.Written = int64(r.last.Sum(mWritten, nil))
	res.Produced = int64(r.last.Sum(mProduced, nil))
	res.Errors = int64(r.last.Sum(mErrors, nil))
	res.Retries = int64(r.last.Sum(mRetries, nil))
	res.MaxLagGauge, res.MaxLagBytes = r.maxGauge, r.maxBytes
	var first, lastT float64 = -1, 0
	var prev *LagSample
	for i := range r.samples {
		s := &r.samples[i]
		res.MaxLagRecords = max(res.MaxLagRecords, s.Written-s.Produced)
		if s.Produced > 0 && first < 0 {
			first = s.T - r.period.Seconds() // the first ack came within the period before
		}
		if prev != nil && s.Produced > prev.Produced {
			lastT = s.T
		}
		prev = s
	}
	// Peak over 1 s windows: acknowledgements come in bursts, so shorter
	// windows would report the burst, not a sustained rate.
	for i, j := 0, 0; i < len(r.samples); i++ {
		for j < len(r.samples) && r.samples[j].T-r.samples[i].T < 1 {
			j++
		}
		if j == len(r.samples) {
			break
		}
		a, b := r.samples[i], r.samples[j]
		res.PeakRecordsPerS = max(res.PeakRecordsPerS, (b.Produced-a.Produced)/(b.T-a.T))
	}
	if first >= 0 && lastT > first {
		res.ForwardS = lastT - max(first, 0)
		res.RecordsPerS = float64(res.Produced) / res.ForwardS
		res.MBPerS = r.last.Sum(mBytes, nil) / res.ForwardS / 1e6
	}
	// Drain: from the sample where the aggregator wrote its last record to
	// the one where Kafka had acknowledged all of them.
	if n := len(r.samples); n > 0 && r.last.Sum(mWritten, nil) > 0 {
		final := r.samples[n-1].Written
		tw, tp := -1.0, -1.0
		for _, s := range r.samples {
			if tw < 0 && s.Written >= final {
				tw = s.T
			}
			if tp < 0 && s.Written >= final && s.Produced >= final {
				tp = s.T
			}
		}
		if tw >= 0 && tp >= 0 {
			res.DrainS = tp - tw
		}
	}
	ack := r.last.Buckets(mAck, nil)
	res.AckP50S = bucketQuantile(ack, 0.50)
	res.AckP99S = bucketQuantile(ack, 0.99)
}

// bucketQuantile returns the upper bound of the cumulative bucket holding
// quantile q (0 when the histogram is empty).
func bucketQuantile(b map[float64]float64, q float64) float64 {
	if len(b) == 0 {
		return 0
	}
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	total := b[les[len(les)-1]] // the +Inf bucket
	if total == 0 {
		return 0
	}
	for _, le := range les {
		if b[le] >= q*total {
			return le
		}
	}
	return les[len(les)-1]
}
