package kafka

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/segment"
)

type fwdMetrics struct {
	produced, producedBytes, errors, retries prometheus.Counter
	checkpointErrors                         prometheus.Counter
	lagRecords, lagBytes, oldestAge          prometheus.Gauge
	checkpointSeq, checkpointOffset          prometheus.Gauge
	ackLatency                               prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, f *Forwarder) (*fwdMetrics, error) {
	const ns, sub = "logagg", "forward_kafka"
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	m := &fwdMetrics{
		produced:         c("records_produced_total", "Records Kafka acknowledged."),
		producedBytes:    c("bytes_produced_total", "Value bytes of the records Kafka acknowledged."),
		errors:           c("errors_total", "Produce attempts that failed after kgo's own retries; each record is produced again."),
		retries:          c("retries_total", "Records produced again after a failure."),
		checkpointErrors: c("checkpoint_errors_total", "Checkpoint saves that failed (the previous checkpoint stays valid)."),
		lagRecords:       g("lag_records", "Records read from the log and not yet acknowledged by Kafka."),
		lagBytes:         g("lag_bytes", "Bytes of the local log after the acknowledged position, read or not."),
		oldestAge:        g("oldest_unsent_age_seconds", "Age (since the aggregator received it) of the oldest record not yet acknowledged; 0 when none."),
		checkpointSeq:    g("checkpoint_segment", "Segment of the durable checkpoint."),
		checkpointOffset: g("checkpoint_offset_bytes", "Byte offset of the durable checkpoint in its segment."),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "ack_latency_seconds",
			Help:    "From a --seq stamped record's sent_ns at the producer to Kafka's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 22), // 100µs .. ~3.5 min
		}),
	}
	if reg == nil {
		return m, nil
	}
	skipped := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "missing_segments_total",
		Help: "Segments that were deleted before the forwarder read them (never by our own retention)."},
		func() float64 { return float64(f.reader.Stats().MissingSegments) })
	torn := prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "torn_bytes_total",
		Help: "Bytes of incomplete last lines of rotated segments (a writer crash), not forwarded."},
		func() float64 { return float64(f.reader.Stats().TornBytes) })
	for _, col := range []prometheus.Collector{m.produced, m.producedBytes, m.errors, m.retries, m.checkpointErrors,
		m.lagRecords, m.lagBytes, m.oldestAge, m.checkpointSeq, m.checkpointOffset, m.ackLatency, skipped, torn} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("kafka forwarder: register metrics: %w", err)
		}
	}
	return m, nil
}

// checkpointLoop saves the acknowledged position every CheckpointInterval
// and refreshes the gauges, until done is closed.
func (f *Forwarder) checkpointLoop(done <-chan struct{}) {
	t := time.NewTicker(f.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			_ = f.saveCheckpoint() // counted; the next tick tries again
		}
	}
}

// saveCheckpoint makes the acknowledged position durable (if it moved) and
// updates the gauges.
func (f *Forwarder) saveCheckpoint() error {
	acked, inFlight, oldest := f.t.snapshot()
	f.m.lagRecords.Set(float64(inFlight))
	if oldest.IsZero() {
		f.m.oldestAge.Set(0)
	} else {
		f.m.oldestAge.Set(max(0, time.Since(oldest).Seconds()))
	}
	if lb, _, err := segment.Backlog(f.cfg.From, acked); err == nil {
		f.m.lagBytes.Set(float64(lb))
	}
	if acked.Seq == 0 || acked == f.Checkpoint() {
		return nil
	}
	if err := segment.SaveCheckpoint(f.cfg.CheckpointPath, acked); err != nil {
		f.m.checkpointErrors.Inc()
		return fmt.Errorf("kafka forwarder: %w", err)
	}
	f.durableMu.Lock()
	f.durable = acked
	f.durableMu.Unlock()
	f.m.checkpointSeq.Set(float64(acked.Seq))
	f.m.checkpointOffset.Set(float64(acked.Offset))
	return nil
}

// Lag is how far the forwarder is behind its log.
type Lag struct {
	Records int   // read and not yet acknowledged
	Bytes   int64 // of the log after the acknowledged position, read or not
	// Lines says a complete line follows the acknowledged position: there
	// is something to ship. A partial last line (still being written, or
	// torn by a crash) is not one.
	Lines bool
}

// Lag measures how far the forwarder is behind its log; the lag gauges
// and CaughtUp both read it.
func (f *Forwarder) Lag() (Lag, error) {
	acked, inFlight, _ := f.t.snapshot()
	l := Lag{Records: inFlight}
	var err error
	l.Bytes, l.Lines, err = segment.Backlog(f.cfg.From, acked)
	return l, err
}

// CaughtUp reports whether every complete line present in the log has been
// acknowledged (aggregator forward --once stops there).
func (f *Forwarder) CaughtUp() (bool, error) {
	l, err := f.Lag()
	return err == nil && l.Records == 0 && !l.Lines, err
}
