package otlp

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/segment"
)

type fwdMetrics struct {
	exported, requestBytes, errors, retries, rejected prometheus.Counter
	checkpointErrors                                  prometheus.Counter
	lagRecords, lagBytes, oldestAge                   prometheus.Gauge
	checkpointSeq, checkpointOffset                   prometheus.Gauge
	ackLatency                                        prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, f *Forwarder) (*fwdMetrics, error) {
	const ns, sub = "logagg", "forward_otlp"
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help})
	}
	m := &fwdMetrics{
		exported:         c("records_exported_total", "Records the OTLP endpoint accepted."),
		requestBytes:     c("request_bytes_total", "Bytes of the accepted export requests, as sent (compressed)."),
		errors:           c("errors_total", "Export attempts that failed; each request is sent again (or split, when refused as it is)."),
		retries:          c("retries_total", "Requests sent again after a failure."),
		rejected:         c("records_rejected_total", "Records the endpoint refused for good (partial success, or refused alone); they are not sent again."),
		checkpointErrors: c("checkpoint_errors_total", "Checkpoint saves that failed (the previous checkpoint stays valid)."),
		lagRecords:       g("lag_records", "Records read from the log and not yet acknowledged by the endpoint."),
		lagBytes:         g("lag_bytes", "Bytes of the local log after the acknowledged position, read or not."),
		oldestAge:        g("oldest_unsent_age_seconds", "Age (since the aggregator received it) of the oldest record not yet acknowledged; 0 when none."),
		checkpointSeq:    g("checkpoint_segment", "Segment of the durable checkpoint."),
		checkpointOffset: g("checkpoint_offset_bytes", "Byte offset of the durable checkpoint in its segment."),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "ack_latency_seconds",
			Help:    "From a --seq stamped record's sent_ns at the producer to the endpoint's acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 22),
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
	for _, col := range []prometheus.Collector{m.exported, m.requestBytes, m.errors, m.retries, m.rejected, m.checkpointErrors,
		m.lagRecords, m.lagBytes, m.oldestAge, m.checkpointSeq, m.checkpointOffset, m.ackLatency, skipped, torn} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("otlp forwarder: register metrics: %w", err)
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
		return fmt.Errorf("otlp forwarder: %w", err)
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
	// Lines says a complete line follows the acknowledged position.
	Lines bool
}

// Lag measures how far the forwarder is behind its log.
func (f *Forwarder) Lag() (Lag, error) {
	acked, inFlight, _ := f.t.snapshot()
	l := Lag{Records: inFlight}
	var err error
	l.Bytes, l.Lines, err = segment.Backlog(f.cfg.From, acked)
	return l, err
}

// CaughtUp reports whether every complete line present in the log has been
// acknowledged.
func (f *Forwarder) CaughtUp() (bool, error) {
	l, err := f.Lag()
	return err == nil && l.Records == 0 && !l.Lines, err
}
