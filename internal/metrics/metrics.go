// Package metrics holds the aggregator's Prometheus collectors.
//
// Collectors are created on a registry handed in by the caller (never the
// global default registry), so tests can build as many independent
// aggregators as they like. Hot paths never resolve label values per record:
// a listener resolves its children once (ForListener) and adds per batch.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Decode error kinds, the values of the "kind" label of decode_errors_total.
// They are the names of the record flags (record.FlagName): a record flagged
// "truncated" in the output is counted under kind="truncated".
const (
	KindMalformedJSON = "malformed_json"  // looked like JSON, did not parse; kept raw
	KindInvalidUTF8   = "invalid_utf8"    // bytes replaced so the output stays valid JSON
	KindNUL           = "nul_bytes"       // NUL bytes escaped
	KindControl       = "control_chars"   // other control bytes escaped
	KindTruncated     = "truncated"       // cut at --max-record
	KindContinuation  = "continuation"    // the rest of a frame longer than --max-record
	KindPartial       = "partial"         // last frame at EOF had no delimiter; kept
	KindSyslog        = "syslog_parse"    // started like syslog, did not parse; kept raw
	KindReservedKey   = "reserved_key"    // JSON used our reserved key "agg"; renamed
	KindDuplicateKey  = "duplicate_key"   // JSON repeated a top-level member name
	KindNotObject     = "json_not_object" // a JSON array or string, not an object
	KindFraming       = "framing"         // bad octet count; resynchronised at the next delimiter
)

// Drop causes, the values of the "cause" label of dropped_total.
const (
	CauseKernelOverflow = "kernel_rxq_ovfl" // datagrams the kernel dropped (SO_RXQ_OVFL)
	CauseDrainTimeout   = "drain_timeout"   // records still queued when the drain deadline hit
	CauseDiskFull       = "disk_full"       // datagrams dropped because --max-disk was reached
	CauseWriteError     = "write_error"     // batch lost because the output could not be written
	CauseOversize       = "oversize"        // bytes of a datagram beyond the receive buffer, cut by the kernel
)

// Metrics are all collectors of one aggregator.
type Metrics struct {
	RecordsIn    *prometheus.CounterVec // listener
	BytesIn      *prometheus.CounterVec // listener
	RecordsOut   *prometheus.CounterVec // listener
	BytesOut     *prometheus.CounterVec // listener
	DecodeErrors *prometheus.CounterVec // listener, kind
	Formats      *prometheus.CounterVec // listener, format
	Dropped      *prometheus.CounterVec // listener, cause
	DroppedBytes *prometheus.CounterVec // listener, cause
	Connections  *prometheus.GaugeVec   // listener
	Accepted     *prometheus.CounterVec // listener
	RcvBuf       *prometheus.GaugeVec   // listener: receive buffer the kernel granted

	QueueDepth    prometheus.Gauge
	QueueCapacity prometheus.Gauge
	BatchRecords  prometheus.Histogram
	BatchBytes    prometheus.Histogram
	WriteSeconds  prometheus.Histogram
	FsyncSeconds  prometheus.Histogram
	Rotations     prometheus.Counter
	Reopens       prometheus.Counter
	WriteErrors   prometheus.Counter
	OutputBytes   prometheus.Gauge // bytes in the current segment
	DiskBytes     prometheus.Gauge // bytes of all segments
	DiskCapWaits  prometheus.Counter
}

// New creates the collectors and registers them on reg (which may be nil
// for tests that do not scrape).
func New(reg prometheus.Registerer) *Metrics {
	const ns = "logagg"
	m := &Metrics{
		RecordsIn:    prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_in_total", Help: "Records received, per listener."}, []string{"listener"}),
		BytesIn:      prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "bytes_in_total", Help: "Payload bytes received, per listener."}, []string{"listener"}),
		RecordsOut:   prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_out_total", Help: "Records written to the output file, per listener."}, []string{"listener"}),
		BytesOut:     prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "bytes_out_total", Help: "JSON bytes written to the output file, per listener."}, []string{"listener"}),
		DecodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "decode_errors_total", Help: "Records kept despite bad input, by kind."}, []string{"listener", "kind"}),
		Formats:      prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "records_by_format_total", Help: "Records by detected input format."}, []string{"listener", "format"}),
		Dropped:      prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dropped_total", Help: "Records or connections lost, by cause."}, []string{"listener", "cause"}),
		DroppedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dropped_bytes_total", Help: "Received bytes that reached no record, by cause."}, []string{"listener", "cause"}),
		Connections:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "connections", Help: "Open connections, per stream listener."}, []string{"listener"}),
		Accepted:     prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "connections_accepted_total", Help: "Connections accepted, per stream listener."}, []string{"listener"}),
		RcvBuf:       prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "socket_receive_buffer_bytes", Help: "SO_RCVBUF the kernel granted, per listener."}, []string{"listener"}),

		QueueDepth:    prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "queue_depth_batches", Help: "Batches waiting for the writer."}),
		QueueCapacity: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "queue_capacity_batches", Help: "Capacity of the batch queue."}),
		BatchRecords:  prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "write_batch_records", Help: "Records per write syscall.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		BatchBytes:    prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "write_batch_bytes", Help: "Bytes per write syscall.", Buckets: prometheus.ExponentialBuckets(256, 4, 10)}),
		WriteSeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "write_seconds", Help: "Latency of one batch write.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}),
		FsyncSeconds:  prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "fsync_seconds", Help: "Latency of fsync.", Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12)}),
		Rotations:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "rotations_total", Help: "Output file rotations."}),
		Reopens:       prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "reopens_total", Help: "Output file reopens (SIGHUP)."}),
		WriteErrors:   prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "write_errors_total", Help: "Failed writes to the output file."}),
		OutputBytes:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "output_segment_bytes", Help: "Size of the active output segment."}),
		DiskBytes:     prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "output_disk_bytes", Help: "Bytes of all output segments (active and rotated)."}),
		DiskCapWaits:  prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "disk_cap_waits_total", Help: "Writes held back because --max-disk was reached and no segment could be deleted."}),
	}
	if reg != nil {
		reg.MustRegister(m.RecordsIn, m.BytesIn, m.RecordsOut, m.BytesOut, m.DecodeErrors, m.Formats,
			m.Dropped, m.DroppedBytes, m.Connections, m.Accepted, m.RcvBuf, m.QueueDepth, m.QueueCapacity, m.BatchRecords,
			m.BatchBytes, m.WriteSeconds, m.FsyncSeconds, m.Rotations, m.Reopens, m.WriteErrors, m.OutputBytes,
			m.DiskBytes, m.DiskCapWaits)
	}
	return m
}

// Listener is the set of children of one listener, resolved once so that the
// hot path only does atomic adds.
type Listener struct {
	Name       string
	RecordsIn  prometheus.Counter
	BytesIn    prometheus.Counter
	RecordsOut prometheus.Counter
	BytesOut   prometheus.Counter
	Conns      prometheus.Gauge
	Accepted   prometheus.Counter
	RcvBuf     prometheus.Gauge
	m          *Metrics
}

// ForListener resolves the children for the listener named name (its URL).
func (m *Metrics) ForListener(name string) *Listener {
	return &Listener{
		Name:       name,
		RecordsIn:  m.RecordsIn.WithLabelValues(name),
		BytesIn:    m.BytesIn.WithLabelValues(name),
		RecordsOut: m.RecordsOut.WithLabelValues(name),
		BytesOut:   m.BytesOut.WithLabelValues(name),
		Conns:      m.Connections.WithLabelValues(name),
		Accepted:   m.Accepted.WithLabelValues(name),
		RcvBuf:     m.RcvBuf.WithLabelValues(name),
		m:          m,
	}
}

// Forget removes every series labelled with listener name, e.g. the
// requested URL of a listener that is known by its bound URL instead.
func (m *Metrics) Forget(name string) {
	for _, v := range []*prometheus.CounterVec{m.RecordsIn, m.BytesIn, m.RecordsOut, m.BytesOut, m.DecodeErrors,
		m.Formats, m.Dropped, m.DroppedBytes, m.Accepted} {
		v.DeletePartialMatch(prometheus.Labels{"listener": name})
	}
	for _, v := range []*prometheus.GaugeVec{m.Connections, m.RcvBuf} {
		v.DeletePartialMatch(prometheus.Labels{"listener": name})
	}
}

// DecodeError adds n to the decode error counter of kind.
func (l *Listener) DecodeError(kind string, n int) {
	if n > 0 {
		l.m.DecodeErrors.WithLabelValues(l.Name, kind).Add(float64(n))
	}
}

// Format adds n records of the given input format.
func (l *Listener) Format(format string, n int) {
	if n > 0 {
		l.m.Formats.WithLabelValues(l.Name, format).Add(float64(n))
	}
}

// Drop adds n to the drop counter of cause.
func (l *Listener) Drop(cause string, n int) {
	if n > 0 {
		l.m.Dropped.WithLabelValues(l.Name, cause).Add(float64(n))
	}
}

// DropBytes adds n to the dropped bytes counter of cause.
func (l *Listener) DropBytes(cause string, n int) {
	if n > 0 {
		l.m.DroppedBytes.WithLabelValues(l.Name, cause).Add(float64(n))
	}
}

// Root returns the aggregator-wide collectors.
func (l *Listener) Root() *Metrics { return l.m }
