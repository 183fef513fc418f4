// Package batcher is the shared encode-and-submit loop of message-oriented
// transports (shm rings, POSIX queues): records in, counted batches out.
package batcher

import (
	"time"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// Batcher encodes the records of one message-oriented source (a ring
// frame, a queue message) into pipeline batches, counts them per batch and
// submits them. A message is one record, or an RFC 7464 sequence of records
// (package framing); a record longer than Options.MaxRecord is encoded in
// pieces flagged truncated and continuation. It belongs to one goroutine.
type Batcher struct {
	d    transport.Deps
	meta *record.Meta
	enc  *record.Encoder
	b    *pipeline.Batch
	max  int
	// Err is set once Submit failed (the hard stop): later records are
	// counted as dropped instead of encoded.
	Err    error
	tally  transport.Tally
	recvNS int64
	// encodeFn and countFn are bound once, so framing.Message does not
	// allocate a closure per message.
	encodeFn, countFn func(rec []byte, flags record.Flags)
	lost              int // records counted by countFn
	// OnFlush, if set, is called with each batch just before it is
	// submitted, every record of the messages handled so far in it: a
	// source adds its pipeline.Completion there (shm: the ring offset to
	// release once the batch is written).
	OnFlush func(b *pipeline.Batch)
}

// New returns a Batcher encoding with meta (already Prepared).
func New(d transport.Deps, m *record.Meta) *Batcher {
	s := &Batcher{d: d, meta: m, enc: record.NewEncoder(), b: d.Out.NewBatch(), max: d.Opts.MaxRecord}
	s.encodeFn, s.countFn = s.encode, func([]byte, record.Flags) { s.lost++ }
	return s
}

// Message encodes the records of one message; it submits when the batch
// reaches Deps.BatchBytes.
func (s *Batcher) Message(f []byte) {
	if s.Err != nil {
		s.lost = 0
		framing.Message(f, s.max, false, s.countFn)
		if m := s.d.Metrics; m != nil {
			m.Drop(metrics.CauseDrainTimeout, s.lost)
			m.DropBytes(metrics.CauseDrainTimeout, len(f))
		}
		return
	}
	if s.b.Records == 0 {
		s.recvNS = time.Now().UnixNano()
	}
	s.meta.RecvNS = s.recvNS
	s.tally.Bytes += len(f)
	framing.Message(f, s.max, false, s.encodeFn)
	if len(s.b.Buf) >= s.d.BatchBytes {
		s.Flush()
	}
}

func (s *Batcher) encode(rec []byte, flags record.Flags) {
	var res record.Result
	s.b.Buf, res = s.enc.Append(s.b.Buf, rec, s.meta, flags)
	s.b.Records++
	s.tally.Add(res)
}

// Flush submits the current batch (blocking: backpressure) and counts it.
func (s *Batcher) Flush() {
	if s.b.Records == 0 || s.Err != nil {
		return
	}
	n := s.b.Records
	s.tally.Flush(s.d.Metrics)
	s.b.Origin = s.d.Metrics
	if s.OnFlush != nil {
		s.OnFlush(s.b)
	}
	if err := s.d.Out.Submit(s.d.HardStop, s.b); err != nil {
		s.Err = err
		if m := s.d.Metrics; m != nil {
			m.Drop(metrics.CauseDrainTimeout, n)
		}
		return
	}
	s.b = s.d.Out.NewBatch()
}

// Release drops an unsubmitted batch (nothing to recycle through the
// Submitter interface).
func (s *Batcher) Release() { s.b = nil }
