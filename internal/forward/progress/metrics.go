package progress

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/segment"
)

// metrics are the ones every forwarder exports about its position; its
// own (what it sent, its errors) it declares with Counter.
type metrics struct {
	checkpointErrors                prometheus.Counter
	lagRecords, lagBytes, oldestAge prometheus.Gauge
	checkpointSeq, checkpointOffset prometheus.Gauge
	ackLatency                      prometheus.Histogram
}

func (m *metrics) init(cfg Config, r *segment.Reader, reg prometheus.Registerer) error {
	sub := "forward_" + cfg.Name
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "logagg", Subsystem: sub, Name: name, Help: help})
	}
	*m = metrics{
		checkpointErrors: Counter(cfg.Name, "checkpoint_errors_total", "Checkpoint saves that failed (the previous checkpoint stays valid)."),
		lagRecords:       g("lag_records", "Records read from the log and not yet acknowledged by "+cfg.Peer+"."),
		lagBytes:         g("lag_bytes", "Bytes of the local log after the acknowledged position, read or not."),
		oldestAge:        g("oldest_unsent_age_seconds", "Age (since the aggregator received it) of the oldest record not yet acknowledged; 0 when none."),
		checkpointSeq:    g("checkpoint_segment", "Segment of the durable checkpoint."),
		checkpointOffset: g("checkpoint_offset_bytes", "Byte offset of the durable checkpoint in its segment."),
		ackLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "logagg", Subsystem: sub, Name: "ack_latency_seconds",
			Help:    "From a --seq stamped record's sent_ns at the producer to " + cfg.Peer + "'s acknowledgement.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 22), // 100µs .. ~3.5 min
		}),
	}
	if reg == nil {
		return nil
	}
	counterFunc := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "logagg", Subsystem: sub, Name: name, Help: help}, f)
	}
	for _, col := range []prometheus.Collector{m.checkpointErrors, m.lagRecords, m.lagBytes, m.oldestAge,
		m.checkpointSeq, m.checkpointOffset, m.ackLatency,
		counterFunc("missing_segments_total", "Segments that were deleted before the forwarder read them (never by our own retention).",
			func() float64 { return float64(r.Stats().MissingSegments) }),
		counterFunc("torn_bytes_total", "Bytes of incomplete last lines of rotated segments (a writer crash), not forwarded.",
			func() float64 { return float64(r.Stats().TornBytes) }),
	} {
		if err := reg.Register(col); err != nil {
			return err
		}
	}
	return nil
}

// Counter is a counter named as forwarder name's other metrics, for the
// ones it declares itself.
func Counter(name, metric, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "logagg", Subsystem: "forward_" + name, Name: metric, Help: help})
}
