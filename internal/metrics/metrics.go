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
	CauseRule           = "rule"            // a rule dropped the record
	CauseRateLimit      = "rate_limit"      // a rule's rate limit suppressed the record
	CauseUnrouted       = "unrouted"        // no rule routed the record and unrouted is discard
	CauseDiscarded      = "discarded"       // routed to a discard output only
	CauseOutputFull     = "output_full"     // the output's queue was full and it drops when full
)

// Kinds of memory_limited_total.
const (
	LimitConnections  = "connections"    // a connection not accepted yet: the connections' budget was spent
	LimitPartialFrame = "partial_frames" // an incomplete frame written out early: the partial-frame budget was spent
	LimitFiles        = "files"          // a file matched by a file input's glob not followed yet: the connections' budget was spent
)

// Why a listener did not accept, the values of the "cause" label of
// accept_paused_seconds_total: it stops accepting rather than accept a
// connection it cannot serve, and the client waits in the listen backlog.
const (
	PauseMaxConns     = "max_conns"     // every --max-conns slot is taken
	PauseFDs          = "fds"           // file descriptors short (the reserve left for the rest of the daemon)
	PauseMemoryBudget = "memory_budget" // the connections' share of limits.memory is spent
	PauseMemory       = "memory"        // the kernel refused memory for a connection (a ring, a socket buffer)
	PauseError        = "error"         // accept failed for another reason; retried after a pause
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
	AcceptPaused *prometheus.CounterVec // listener, cause
	RcvBuf       *prometheus.GaugeVec   // listener: receive buffer the kernel granted
	// Request/response inputs (OTLP): requests refused whole, and records
	// left out of accepted requests (partial success), by cause.
	RequestsRefused *prometheus.CounterVec // listener, cause
	RecordsRejected *prometheus.CounterVec // listener, cause

	// Inputs that read what others write (the journal, files).
	InputLagRecords    *prometheus.GaugeVec   // listener
	InputLagBytes      *prometheus.GaugeVec   // listener
	InputFiles         *prometheus.GaugeVec   // listener
	InputRotations     *prometheus.CounterVec // listener
	InputCheckpointAge *prometheus.GaugeVec   // listener

	// Per output (a record routed to two outputs counts in both).
	OutputRecords      *prometheus.CounterVec // output
	OutputBytes        *prometheus.CounterVec // output
	OutputDropped      *prometheus.CounterVec // output, cause
	OutputDroppedBytes *prometheus.CounterVec // output, cause
	// Per rule.
	RuleMatched    *prometheus.CounterVec // rule
	RuleDropped    *prometheus.CounterVec // rule
	RuleSuppressed *prometheus.CounterVec // rule

	// What each output's queue, writer and file do, by output.
	queueDepth, queueCapacity                    *prometheus.GaugeVec
	batchRecords, batchBytes, writeSec, fsyncSec *prometheus.HistogramVec
	rotations, reopens, writeErrors, capWaits    *prometheus.CounterVec
	segmentBytes, diskBytes                      *prometheus.GaugeVec

	// Writer is the main output's ("default").
	Writer *Writer

	// MemoryLimited counts what a memory bound held back or cut short, by
	// kind: connections not accepted while the connection budget was
	// spent (connections), incomplete frames written out early
	// (partial_frames).
	MemoryLimited *prometheus.CounterVec // kind

	// Memory counts the daemon's buffers by kind and exports them with
	// the Go runtime's memory and the resident set (memory.go).
	Memory *Memory
}

// Writer is the collectors of one output's queue, writer and file.
type Writer struct {
	Name          string
	QueueDepth    prometheus.Gauge
	QueueCapacity prometheus.Gauge
	BatchRecords  prometheus.Observer
	BatchBytes    prometheus.Observer
	WriteSeconds  prometheus.Observer
	FsyncSeconds  prometheus.Observer
	Rotations     prometheus.Counter
	Reopens       prometheus.Counter
	WriteErrors   prometheus.Counter
	OutputBytes   prometheus.Gauge // bytes in the current segment
	DiskBytes     prometheus.Gauge // bytes of all segments
	DiskCapWaits  prometheus.Counter
	// Records and Bytes count what the writer wrote (OutputRecords,
	// OutputBytes of the output).
	Records prometheus.Counter
	Bytes   prometheus.Counter
	m       *Metrics
}

// MainOutput is the name of the output configured under "output" (the
// others are named under "outputs").
const MainOutput = "default"

// New creates the collectors and registers them on reg (which may be nil
// for tests that do not scrape).
func New(reg prometheus.Registerer) *Metrics {
	const ns = "logagg"
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	gv := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: name, Help: help}, labels)
	}
	hv := func(name, help string, buckets []float64) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: name, Help: help, Buckets: buckets}, []string{"output"})
	}
	m := &Metrics{
		RecordsIn:       cv("records_in_total", "Records received, per listener.", "listener"),
		BytesIn:         cv("bytes_in_total", "Payload bytes received, per listener.", "listener"),
		RecordsOut:      cv("records_out_total", "Records written to the output file, per listener (a record routed to several outputs counts once, where it went first).", "listener"),
		BytesOut:        cv("bytes_out_total", "JSON bytes written to the output file, per listener.", "listener"),
		DecodeErrors:    cv("decode_errors_total", "Records kept despite bad input, by kind.", "listener", "kind"),
		Formats:         cv("records_by_format_total", "Records by detected input format.", "listener", "format"),
		Dropped:         cv("dropped_total", "Records or connections lost, by cause.", "listener", "cause"),
		DroppedBytes:    cv("dropped_bytes_total", "Received bytes that reached no record, by cause.", "listener", "cause"),
		Connections:     gv("connections", "Open connections, per stream listener.", "listener"),
		Accepted:        cv("connections_accepted_total", "Connections accepted, per stream listener.", "listener"),
		AcceptPaused:    cv("accept_paused_seconds_total", "Seconds a listener did not accept because a new connection could not have been served (new clients wait in the listen backlog), by cause.", "listener", "cause"),
		RcvBuf:          gv("socket_receive_buffer_bytes", "SO_RCVBUF the kernel granted, per listener.", "listener"),
		RequestsRefused: cv("requests_refused_total", "Requests a request/response input (OTLP) refused whole, by cause; the client keeps their records.", "listener", "cause"),
		RecordsRejected: cv("records_rejected_total", "Records a request/response input (OTLP) left out of an accepted request (partial success), by cause.", "listener", "cause"),

		InputLagRecords:    gv("input_lag_records", "Records (journal entries, lines) the source holds that are not yet written, as far as the input can tell.", "listener"),
		InputLagBytes:      gv("input_lag_bytes", "Bytes of the source not yet read and written.", "listener"),
		InputFiles:         gv("input_files", "Files a file input watches.", "listener"),
		InputRotations:     cv("input_rotations_total", "Rotations (rename, truncation, deletion, a new file at the path) an input followed.", "listener"),
		InputCheckpointAge: gv("input_checkpoint_age_seconds", "Seconds since the input's durable checkpoint last moved.", "listener"),

		OutputRecords:      cv("output_records_total", "Records written, per output.", "output"),
		OutputBytes:        cv("output_bytes_total", "JSON bytes written, per output.", "output"),
		OutputDropped:      cv("output_dropped_total", "Records an output did not write, by cause.", "output", "cause"),
		OutputDroppedBytes: cv("output_dropped_bytes_total", "Received bytes of the records an output did not write, by cause.", "output", "cause"),
		RuleMatched:        cv("rule_matched_total", "Records a rule matched.", "rule"),
		RuleDropped:        cv("rule_dropped_total", "Records a rule dropped.", "rule"),
		RuleSuppressed:     cv("rule_suppressed_total", "Records a rule's rate limit suppressed.", "rule"),

		queueDepth:    gv("queue_depth_batches", "Batches waiting for the writer.", "output"),
		queueCapacity: gv("queue_capacity_batches", "Capacity of the batch queue.", "output"),
		batchRecords:  hv("write_batch_records", "Records per write syscall.", prometheus.ExponentialBuckets(1, 4, 10)),
		batchBytes:    hv("write_batch_bytes", "Bytes per write syscall.", prometheus.ExponentialBuckets(256, 4, 10)),
		writeSec:      hv("write_seconds", "Latency of one batch write.", prometheus.ExponentialBuckets(1e-6, 4, 12)),
		fsyncSec:      hv("fsync_seconds", "Latency of fsync.", prometheus.ExponentialBuckets(1e-5, 4, 12)),
		rotations:     cv("rotations_total", "Output file rotations.", "output"),
		reopens:       cv("reopens_total", "Output file reopens (SIGHUP).", "output"),
		writeErrors:   cv("write_errors_total", "Failed writes to the output file.", "output"),
		segmentBytes:  gv("output_segment_bytes", "Size of the active output segment.", "output"),
		diskBytes:     gv("output_disk_bytes", "Bytes of all output segments (active and rotated).", "output"),
		capWaits:      cv("disk_cap_waits_total", "Writes held back because --max-disk was reached and no segment could be deleted.", "output"),
		Memory:        NewMemory(),
		MemoryLimited: cv("memory_limited_total", "Times a memory bound held something back or cut it short, by kind (connections: not accepted yet; partial_frames: written out early; files: a file not followed yet, at a scan).", "kind"),
	}
	if reg != nil {
		reg.MustRegister(m.RecordsIn, m.BytesIn, m.RecordsOut, m.BytesOut, m.DecodeErrors, m.Formats,
			m.Dropped, m.DroppedBytes, m.Connections, m.Accepted, m.AcceptPaused, m.RcvBuf, m.RequestsRefused, m.RecordsRejected,
			m.InputLagRecords, m.InputLagBytes, m.InputFiles, m.InputRotations, m.InputCheckpointAge,
			m.OutputRecords, m.OutputBytes, m.OutputDropped, m.OutputDroppedBytes, m.RuleMatched, m.RuleDropped, m.RuleSuppressed,
			m.queueDepth, m.queueCapacity, m.batchRecords, m.batchBytes, m.writeSec, m.fsyncSec, m.rotations, m.reopens,
			m.writeErrors, m.segmentBytes, m.diskBytes, m.capWaits, m.Memory, m.MemoryLimited)
	}
	m.Writer = m.ForOutput(MainOutput)
	return m
}

// ForOutput resolves the collectors of output name.
func (m *Metrics) ForOutput(name string) *Writer {
	return &Writer{
		Name:          name,
		QueueDepth:    m.queueDepth.WithLabelValues(name),
		QueueCapacity: m.queueCapacity.WithLabelValues(name),
		BatchRecords:  m.batchRecords.WithLabelValues(name),
		BatchBytes:    m.batchBytes.WithLabelValues(name),
		WriteSeconds:  m.writeSec.WithLabelValues(name),
		FsyncSeconds:  m.fsyncSec.WithLabelValues(name),
		Rotations:     m.rotations.WithLabelValues(name),
		Reopens:       m.reopens.WithLabelValues(name),
		WriteErrors:   m.writeErrors.WithLabelValues(name),
		OutputBytes:   m.segmentBytes.WithLabelValues(name),
		DiskBytes:     m.diskBytes.WithLabelValues(name),
		DiskCapWaits:  m.capWaits.WithLabelValues(name),
		Records:       m.OutputRecords.WithLabelValues(name),
		Bytes:         m.OutputBytes.WithLabelValues(name),
		m:             m,
	}
}

// ForgetOutput removes every series of output name (a reload removed it).
func (m *Metrics) ForgetOutput(name string) {
	l := prometheus.Labels{"output": name}
	for _, v := range []*prometheus.CounterVec{m.OutputRecords, m.OutputBytes, m.OutputDropped, m.OutputDroppedBytes,
		m.rotations, m.reopens, m.writeErrors, m.capWaits} {
		v.DeletePartialMatch(l)
	}
	for _, v := range []*prometheus.GaugeVec{m.queueDepth, m.queueCapacity, m.segmentBytes, m.diskBytes} {
		v.DeletePartialMatch(l)
	}
	for _, v := range []*prometheus.HistogramVec{m.batchRecords, m.batchBytes, m.writeSec, m.fsyncSec} {
		v.DeletePartialMatch(l)
	}
}

// Memory is the aggregator's buffer counts (nil-safe to Add to).
func (w *Writer) Memory() *Memory { return w.m.Memory }

// Drop counts n records (and bytes received for them) output w did not
// write, for cause.
func (w *Writer) Drop(cause string, n, bytes int) {
	if n > 0 {
		w.m.OutputDropped.WithLabelValues(w.Name, cause).Add(float64(n))
	}
	if bytes > 0 {
		w.m.OutputDroppedBytes.WithLabelValues(w.Name, cause).Add(float64(bytes))
	}
}

// NewWriter is a Writer nobody scrapes (tests, and code run without a
// daemon).
func NewWriter(name string) *Writer { return New(nil).ForOutput(name) }

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
	// For inputs that read what others write (the journal, files).
	LagRecords, LagBytes, Files, CheckpointAge prometheus.Gauge
	Rotations                                  prometheus.Counter
	m                                          *Metrics
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

// AcceptPaused resolves the paused-accepting counter of cause (one of
// the Pause constants) for this listener; accepting listeners resolve
// theirs once, when they start.
func (l *Listener) AcceptPaused(cause string) prometheus.Counter {
	return l.m.AcceptPaused.WithLabelValues(l.Name, cause)
}

// ForInput also resolves the collectors of an input that reads what
// others write (journal, files), so that only such inputs export them.
func (l *Listener) ForInput() *Listener {
	m := l.m
	l.LagRecords = m.InputLagRecords.WithLabelValues(l.Name)
	l.LagBytes = m.InputLagBytes.WithLabelValues(l.Name)
	l.Files = m.InputFiles.WithLabelValues(l.Name)
	l.CheckpointAge = m.InputCheckpointAge.WithLabelValues(l.Name)
	l.Rotations = m.InputRotations.WithLabelValues(l.Name)
	return l
}

// Forget removes every series labelled with listener name, e.g. the
// requested URL of a listener that is known by its bound URL instead.
func (m *Metrics) Forget(name string) {
	for _, v := range []*prometheus.CounterVec{m.RecordsIn, m.BytesIn, m.RecordsOut, m.BytesOut, m.DecodeErrors,
		m.Formats, m.Dropped, m.DroppedBytes, m.Accepted, m.AcceptPaused, m.InputRotations, m.RequestsRefused, m.RecordsRejected} {
		v.DeletePartialMatch(prometheus.Labels{"listener": name})
	}
	for _, v := range []*prometheus.GaugeVec{m.Connections, m.RcvBuf, m.InputLagRecords, m.InputLagBytes, m.InputFiles, m.InputCheckpointAge} {
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

// Memory is the aggregator's buffer counts.
func (l *Listener) Memory() *Memory { return l.m.Memory }

// Root returns the aggregator-wide collectors.
func (l *Listener) Root() *Metrics { return l.m }
