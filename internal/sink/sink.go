// Package sink is the one place every record passes through on its way from
// a listener to the output: it encodes the record (package record), counts
// it, collects records into batches, hands full batches to the pipeline with
// backpressure, and counts, in records and bytes, whatever a hard stop makes
// it give up.
//
// Every input (stream and datagram sockets, FIFOs, stdin, a captured
// child's output, shared-memory rings, POSIX queues, and any input added
// later) hands its records to an Emitter and nothing else: a rule, a field
// or a counter that must apply to every record is written here once.
//
// # Lifetimes and concurrency
//
// A Sink is shared by all listeners of a daemon and is safe for concurrent
// use. An Emitter belongs to one goroutine (a listener's reader, or one
// event loop for the listener's connections on it); each has its own
// encoder and batch, so the hot path takes no lock.
//
// # Accounting
//
// records_in_total counts every record handed to Emit, and bytes_in_total
// every byte a source reports with Received. A record reaches the output
// (records_out_total, counted by the writer) or is dropped with a cause
// (dropped_total and dropped_bytes_total, with the bytes of its payload):
// records in = records out + dropped. Once the hard stop has ended a Submit,
// the Emitter stops encoding: each later record is counted dropped
// (drain_timeout) as it arrives, so a source can keep draining its input
// without anything it read going uncounted.
package sink

import (
	"context"
	"sync/atomic"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
)

// DefaultBatchBytes is the batch size when Options.BatchBytes is 0.
const DefaultBatchBytes = 64 << 10

// Options configure a Sink.
type Options struct {
	// HardStop ends when the drain must give up (nil: never). A full
	// queue holds an Emitter at most until then.
	HardStop context.Context
	// BatchBytes is the size at which an Emitter hands a batch over
	// (0: DefaultBatchBytes).
	BatchBytes int
}

// Sink is where every listener of a daemon sends its records.
type Sink struct {
	out        pipeline.Submitter
	hardStop   context.Context
	batchBytes int

	// lostRecords and lostBytes total what every Emitter gave up at the
	// hard stop, for the exit summary (Lost).
	lostRecords, lostBytes atomic.Int64
}

// Lost is what the sink's Emitters received and gave up at the hard stop
// (drain_timeout), in records and received bytes, so far.
func (s *Sink) Lost() pipeline.Loss {
	return pipeline.Loss{Records: s.lostRecords.Load(), Bytes: s.lostBytes.Load()}
}

// New returns a Sink that submits batches to out.
func New(out pipeline.Submitter, o Options) *Sink {
	if o.HardStop == nil {
		o.HardStop = context.Background()
	}
	if o.BatchBytes <= 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	return &Sink{out: out, hardStop: o.HardStop, batchBytes: o.BatchBytes}
}

// HardStop is the context that ends when the drain must give up; sources
// that drain their input on shutdown stop there.
func (s *Sink) HardStop() context.Context { return s.hardStop }

// BatchBytes is the size at which an Emitter hands a batch over.
func (s *Sink) BatchBytes() int { return s.batchBytes }

// Emitter returns a new Emitter counting into m (nil: counts nowhere).
// It belongs to the calling goroutine.
func (s *Sink) Emitter(m *metrics.Listener) *Emitter {
	e := &Emitter{s: s, m: m, enc: record.NewEncoder()}
	e.messageFn = e.messageRecord
	return e
}

// Emitter encodes one goroutine's records into batches. Not safe for
// concurrent use.
type Emitter struct {
	s   *Sink
	m   *metrics.Listener
	enc *record.Encoder

	batch   *pipeline.Batch
	batchIn int // payload bytes of the records in batch
	tally   Tally
	err     error // a Submit failed at the hard stop: records are dropped from now on

	// messageFn is messageRecord bound once, so Message does not allocate
	// a closure per message; msgMeta is the meta it encodes with.
	messageFn func(rec []byte, flags record.Flags)
	msgMeta   *record.Meta
}

// Received counts n bytes read from the source (payload and framing).
func (e *Emitter) Received(n int) { e.tally.Bytes += n }

// Emit encodes one record (framing removed) with meta and the flags the
// framer raised. It reports false once the hard stop has been reached: the
// record was counted as dropped instead. A full batch is handed over
// before the record is added, so a completion given to Done after Emit
// rides with the batch that holds the record.
func (e *Emitter) Emit(payload []byte, meta *record.Meta, flags record.Flags) bool {
	if e.err == nil && e.batch != nil && len(e.batch.Buf) >= e.s.batchBytes {
		e.flush()
	}
	if e.err != nil {
		e.tally.Records++
		e.tally.drop(1, len(payload))
		return false
	}
	if e.batch == nil {
		e.batch = e.s.out.NewBatch()
		e.batch.Origin = e.m
	}
	var res record.Result
	e.batch.Buf, res = e.enc.Append(e.batch.Buf, payload, meta, flags)
	e.batch.Records++
	e.batchIn += len(payload)
	e.tally.Add(res)
	return true
}

// Message emits the records of one message (a datagram, a queue message,
// a ring frame: package framing's Message rules), cut says the kernel cut
// the message at its buffer's end.
func (e *Emitter) Message(p []byte, maxRecord int, cut bool, meta *record.Meta) {
	e.msgMeta = meta
	framing.Message(p, maxRecord, cut, e.messageFn)
	e.msgMeta = nil
}

func (e *Emitter) messageRecord(rec []byte, flags record.Flags) { e.Emit(rec, e.msgMeta, flags) }

// Done adds c to the batch holding the records emitted so far, so that
// c.To learns c.Mark once they are written (an acknowledged connection's
// byte count, a shared-memory ring's read offset). A source calls it after
// the records its mark covers, and before any later record: the next Emit
// may hand the batch over. A completion for the same Completer as the previous one
// replaces it: marks only grow. It reports false, and does nothing, when
// no record is waiting in the batch (none emitted since the last hand-over,
// or the hard stop was reached).
func (e *Emitter) Done(c pipeline.Completion) bool {
	b := e.batch
	if e.err != nil || b == nil || b.Records == 0 {
		return false
	}
	if n := len(b.Done); n > 0 && b.Done[n-1].To == c.To {
		b.Done[n-1].Mark = c.Mark
		return true
	}
	b.Done = append(b.Done, c)
	return true
}

// Pending is the number of records waiting in the current batch.
func (e *Emitter) Pending() int {
	if e.batch == nil {
		return 0
	}
	return e.batch.Records
}

// Flush hands the current batch to the pipeline, blocking while the queue
// is full (backpressure) but not past the hard stop, and adds the counts
// to the metrics. It returns the error that stopped a Submit (the hard
// stop), then and at every later call.
func (e *Emitter) Flush() error {
	if e.err == nil {
		e.flush()
	}
	e.flushTally()
	return e.err
}

func (e *Emitter) flush() {
	b := e.batch
	if b == nil || b.Records == 0 {
		return
	}
	// Counters first: whoever sees the batch's records may look at them.
	e.flushTally()
	e.batch = nil
	b.InBytes, e.batchIn = e.batchIn, 0
	if err := e.s.out.Submit(e.s.hardStop, b); err != nil {
		e.err = err
		e.tally.drop(b.Records, b.InBytes)
		e.flushTally()
	}
}

// Err is the error that stopped the Emitter (the hard stop), or nil.
func (e *Emitter) Err() error { return e.err }

// Release ends the Emitter; it must not be used afterwards. Call Flush
// first: records still waiting (there are none after a Flush) are counted
// as dropped, never lost silently.
func (e *Emitter) Release() {
	if b := e.batch; b != nil && b.Records > 0 {
		e.tally.drop(b.Records, e.batchIn)
	}
	e.flushTally()
	e.batch, e.batchIn = nil, 0
}

// flushTally adds the counts to the metrics, and what was given up to the
// sink's total.
func (e *Emitter) flushTally() {
	if e.tally.dropped > 0 || e.tally.droppedBytes > 0 {
		e.s.lostRecords.Add(int64(e.tally.dropped))
		e.s.lostBytes.Add(int64(e.tally.droppedBytes))
	}
	e.tally.Flush(e.m)
}
