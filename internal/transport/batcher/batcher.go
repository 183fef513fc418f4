// Package batcher is the shared encode-and-submit loop of message-oriented
// transports (shm rings, POSIX queues): records in, counted batches out.
package batcher

import (
	"bytes"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// Batcher encodes the records of one message-oriented source (a ring
// frame, a queue message: one or more newline-separated records) into
// pipeline batches, counts them per batch and submits them. It belongs to
// one goroutine.
type Batcher struct {
	d    transport.Deps
	meta *record.Meta
	enc  *record.Encoder
	b    *pipeline.Batch
	max  int
	// Err is set once Submit failed (the hard stop): later records are
	// counted as dropped instead of encoded.
	Err    error
	bytes  int
	flags  record.Flags
	fmts   [record.NumFormats]int
	kinds  map[string]int
	recvNS int64
}

// New returns a Batcher encoding with meta (already Prepared).
func New(d transport.Deps, m *record.Meta) *Batcher {
	return &Batcher{d: d, meta: m, enc: record.NewEncoder(), b: d.Out.NewBatch(), max: d.Opts.MaxRecord, kinds: map[string]int{}}
}

// Message splits one message into records and encodes them; it submits
// when the batch reaches Deps.BatchBytes.
func (s *Batcher) Message(f []byte) {
	if s.Err != nil {
		if m := s.d.Metrics; m != nil {
			m.Drop(metrics.CauseDrainTimeout, bytes.Count(f, []byte{'\n'})+1)
		}
		return
	}
	if s.b.Records == 0 {
		s.recvNS = time.Now().UnixNano()
	}
	s.meta.RecvNS = s.recvNS
	for len(f) > 0 {
		line := f
		if i := bytes.IndexByte(f, '\n'); i >= 0 {
			line, f = f[:i], f[i+1:]
		} else {
			f = nil
		}
		if len(line) == 0 {
			continue
		}
		s.bytes += len(line)
		var in record.Flags
		if s.max > 0 && len(line) > s.max {
			line, in = line[:s.max], record.FlagTruncated
		}
		var res record.Result
		s.b.Buf, res = s.enc.Append(s.b.Buf, line, s.meta, in)
		s.b.Records++
		s.fmts[res.Format]++
		if res.Flags != 0 {
			res.Flags.Each(func(name string) { s.kinds[name]++ })
		}
	}
	if len(s.b.Buf) >= s.d.BatchBytes {
		s.Flush()
	}
}

// Flush submits the current batch (blocking: backpressure) and counts it.
func (s *Batcher) Flush() {
	if s.b.Records == 0 || s.Err != nil {
		return
	}
	n := s.b.Records
	if m := s.d.Metrics; m != nil {
		m.RecordsIn.Add(float64(n))
		m.BytesIn.Add(float64(s.bytes))
		for i, c := range s.fmts {
			m.Format(record.Format(i).String(), c)
		}
		for k, c := range s.kinds {
			m.DecodeError(k, c)
		}
	}
	s.bytes, s.fmts = 0, [record.NumFormats]int{}
	clear(s.kinds)
	s.b.Origin = s.d.Metrics
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
