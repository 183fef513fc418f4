package stream

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"golang.org/x/sys/unix"
)

// readSize is the size of the read buffer. One read of this size usually
// fills one batch at high rates; a longer record grows the buffer up to the
// maximum record size plus room for an octet-count header.
const readSize = 64 << 10

// octetHeaderMax is the longest RFC 6587 header we accept: 9 digits and a space.
const octetHeaderMax = 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// Reader splits one byte stream into records and submits them in batches.
// It keeps an incomplete trailing record between calls of ReadFrom, so a
// caller can switch sources (e.g. from a blocking to a draining read of the
// same fd) without losing or splitting a record. See the package doc.
type Reader struct {
	meta       *record.Meta
	out        pipeline.Submitter
	m          *metrics.Listener
	deps       transport.Deps
	octet      bool
	maxRecord  int
	maxBuf     int
	batchBytes int
	enc        *record.Encoder

	bufp       *[]byte // pooled read buffer, nil once grown or released
	buf        []byte
	start, end int // unconsumed bytes are buf[start:end]

	discard  int  // bytes of an oversized octet frame still to skip
	skipLine bool // skipping the rest of an oversized line

	batch *pipeline.Batch
	err   error // sticky: Submit failed, the reader stopped

	// Counters since the last flush of metrics.
	nRecords int
	nBytes   int
	formats  [record.NumFormats]int
	flags    [16]int
}

// NewReader returns a Reader that encodes with meta (already Prepared; the
// Reader sets meta.RecvNS once per read) and submits to d.Out with
// d.HardStop. octetCounting enables RFC 6587 octet-counted frames.
func NewReader(meta *record.Meta, d transport.Deps, octetCounting bool) *Reader {
	maxRecord := d.Opts.MaxRecord
	if maxRecord <= 0 {
		maxRecord = transport.DefaultOptions().MaxRecord
	}
	bb := d.BatchBytes
	if bb <= 0 {
		bb = 64 << 10
	}
	bufp := bufPool.Get().(*[]byte)
	return &Reader{
		meta:       meta,
		out:        d.Out,
		m:          d.Metrics,
		deps:       d,
		octet:      octetCounting,
		maxRecord:  maxRecord,
		maxBuf:     max(readSize, maxRecord+octetHeaderMax+1),
		batchBytes: bb,
		enc:        record.NewEncoder(),
		bufp:       bufp,
		buf:        *bufp,
	}
}

// Serve reads src until EOF or a read error, submits every record (the last
// unterminated line flagged partial) and returns nil at EOF, otherwise the
// read or submit error. The caller closes src.
func Serve(src io.Reader, meta *record.Meta, d transport.Deps, octetCounting bool) error {
	r := NewReader(meta, d, octetCounting)
	defer r.Release()
	_, err := r.ReadFrom(src)
	if ferr := r.Finish(); err == nil {
		err = ferr
	}
	return err
}

// ReadFrom reads src until it returns an error, submitting records as they
// complete. Everything complete has been submitted when it returns; an
// incomplete trailing record stays buffered for the next ReadFrom or Finish.
// It returns nil when src reached io.EOF, else the read or submit error.
func (r *Reader) ReadFrom(src io.Reader) (int64, error) {
	var total int64
	for {
		if r.err != nil {
			return total, r.err
		}
		r.makeRoom()
		n, err := src.Read(r.buf[r.end:])
		if n > 0 {
			r.meta.RecvNS = time.Now().UnixNano()
			r.end += n
			r.nBytes += n
			total += int64(n)
			r.process(false)
		}
		// Nothing complete is left in the buffer: submit before a read
		// that may block, so a quiet producer's records are not held back.
		r.flush()
		if err != nil {
			if r.err != nil {
				return total, r.err
			}
			if errors.Is(err, io.EOF) {
				return total, nil
			}
			return total, err
		}
	}
}

// Finish ends the stream: a buffered incomplete record is submitted flagged
// partial (an incomplete octet frame likewise), and the last batch is
// submitted. It returns the submit error if the hard stop ended first.
func (r *Reader) Finish() error {
	if r.err == nil {
		r.process(true)
		r.flush()
	}
	r.start, r.end = 0, 0
	r.discard, r.skipLine = 0, false
	return r.err
}

// Release returns the read buffer to the pool. The Reader must not be used
// afterwards.
func (r *Reader) Release() {
	if r.bufp != nil {
		bufPool.Put(r.bufp)
		r.bufp = nil
	}
	r.buf = nil
}

// makeRoom moves unconsumed bytes to the front and grows the buffer when one
// incomplete record fills it.
func (r *Reader) makeRoom() {
	if r.start == r.end {
		r.start, r.end = 0, 0
	} else if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end < len(r.buf) {
		return
	}
	if len(r.buf) >= r.maxBuf {
		// Cannot happen with maxBuf > maxRecord+header (process then
		// always consumes), but never spin on a full buffer.
		r.emit(r.buf[:min(r.end, r.maxRecord)], record.FlagTruncated)
		r.start, r.end = 0, 0
		r.skipLine = true
		return
	}
	nb := make([]byte, min(2*len(r.buf), r.maxBuf))
	copy(nb, r.buf[:r.end])
	if r.bufp != nil { // the pooled buffer is free again
		bufPool.Put(r.bufp)
		r.bufp = nil
	}
	r.buf = nb
}

type octetState uint8

const (
	octNo       octetState = iota // not an octet-counted frame
	octNeedMore                   // cannot tell yet
	octOK                         // count and header length valid
	octBad                        // looks octet-counted, count makes no sense
)

// parseOctet recognises "<1-9 digits> <" at the start of p.
func parseOctet(p []byte) (st octetState, count, hdr int) {
	i := 0
	for i < len(p) && i < octetHeaderMax && p[i] >= '0' && p[i] <= '9' {
		count = count*10 + int(p[i]-'0')
		i++
	}
	switch {
	case i >= octetHeaderMax:
		return octNo, 0, 0
	case i == len(p):
		return octNeedMore, 0, 0
	case p[i] != ' ':
		return octNo, 0, 0
	case i+1 == len(p):
		return octNeedMore, 0, 0
	case p[i+1] != '<':
		return octNo, 0, 0
	case p[0] == '0': // count 0 or a leading zero: not a frame RFC 6587 allows
		return octBad, 0, 0
	}
	return octOK, count, i + 1
}

// process consumes every complete record in the buffer. At eof it also
// consumes the incomplete rest.
func (r *Reader) process(eof bool) {
	for r.start < r.end && r.err == nil {
		if r.discard > 0 {
			k := min(r.discard, r.end-r.start)
			r.start += k
			r.discard -= k
			continue
		}
		p := r.buf[r.start:r.end]
		if r.skipLine {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				r.start = r.end
				return
			}
			r.start += i + 1
			r.skipLine = false
			continue
		}
		if p[0] == '\n' { // empty line: not a record
			r.start++
			continue
		}
		var fl record.Flags
		if r.octet && p[0] >= '0' && p[0] <= '9' {
			st, count, hdr := parseOctet(p)
			switch st {
			case octNeedMore:
				if !eof {
					return
				}
			case octBad:
				fl = record.FlagFraming
			case octOK:
				if r.octetFrame(p, count, hdr, eof) {
					continue
				}
				return
			}
		}
		i := bytes.IndexByte(p, '\n')
		switch {
		case i >= 0 && i <= r.maxRecord:
			r.emit(p[:i], fl)
			r.start += i + 1
		case i >= 0 || len(p) > r.maxRecord:
			r.emit(p[:r.maxRecord], fl|record.FlagTruncated)
			if i >= 0 {
				r.start += i + 1
			} else {
				r.start = r.end
				r.skipLine = true
			}
		case eof:
			r.emit(p, fl|record.FlagPartial)
			r.start = r.end
		default:
			return // wait for the rest of the line
		}
	}
}

// octetFrame handles an octet-counted frame at the start of p and reports
// whether it consumed anything (false: wait for more bytes).
func (r *Reader) octetFrame(p []byte, count, hdr int, eof bool) bool {
	body := p[hdr:]
	switch {
	case count > r.maxRecord && len(body) >= r.maxRecord:
		r.emit(body[:r.maxRecord], record.FlagTruncated)
		r.start += hdr + r.maxRecord
		r.discard = count - r.maxRecord
	case count <= len(body):
		payload := body[:count]
		// Some senders count a trailing newline; framing is not payload.
		if n := len(payload); n > 0 && payload[n-1] == '\n' {
			payload = payload[:n-1]
		}
		r.emit(payload, 0)
		r.start += hdr + count
	case eof:
		fl := record.FlagPartial
		if len(body) > r.maxRecord {
			body, fl = body[:r.maxRecord], fl|record.FlagTruncated
		}
		r.emit(body, fl)
		r.start = r.end
	default:
		return false
	}
	return true
}

// emit encodes one record into the current batch, submitting the batch when
// it is full.
func (r *Reader) emit(payload []byte, fl record.Flags) {
	if r.batch == nil {
		r.batch = r.out.NewBatch()
		r.batch.Origin = r.m
	}
	var res record.Result
	r.batch.Buf, res = r.enc.Append(r.batch.Buf, payload, r.meta, fl)
	r.batch.Records++
	r.nRecords++
	if int(res.Format) < len(r.formats) {
		r.formats[res.Format]++
	}
	for f := uint16(res.Flags); f != 0; f &= f - 1 {
		r.flags[bits.TrailingZeros16(f)]++
	}
	if len(r.batch.Buf) >= r.batchBytes {
		r.flush()
	}
}

// flush submits the current batch, if any, and adds the counters to the
// metrics. A failed Submit (the hard stop ended) loses the batch: it is
// counted as dropped and the reader stops.
func (r *Reader) flush() {
	if r.batch != nil && r.batch.Records > 0 && r.err == nil {
		b := r.batch
		r.batch = nil
		if err := r.out.Submit(r.deps.HardStop, b); err != nil {
			r.err = err
			if r.m != nil {
				r.m.Drop(metrics.CauseDrainTimeout, b.Records)
			}
		}
	}
	r.flushMetrics()
}

func (r *Reader) flushMetrics() {
	if r.m == nil {
		r.nRecords, r.nBytes = 0, 0
		r.formats = [record.NumFormats]int{}
		r.flags = [16]int{}
		return
	}
	if r.nRecords > 0 {
		r.m.RecordsIn.Add(float64(r.nRecords))
		r.nRecords = 0
	}
	if r.nBytes > 0 {
		r.m.BytesIn.Add(float64(r.nBytes))
		r.nBytes = 0
	}
	for i, n := range r.formats {
		if n > 0 {
			r.m.Format(record.Format(i).String(), n)
			r.formats[i] = 0
		}
	}
	for i, n := range r.flags {
		if n > 0 {
			r.m.DecodeError(record.FlagName(i), n)
			r.flags[i] = 0
		}
	}
}

// DrainReader reads an fd without ever waiting in the poller: EAGAIN
// (nothing buffered) or the end of the grace period (a writer that never
// pauses) reads as io.EOF. Pipe-like transports (fifo, stdin, a captured
// child) use it for the shutdown drain.
type DrainReader struct {
	RC    syscall.RawConn
	Until time.Time
}

func (r *DrainReader) Read(p []byte) (int, error) {
	if !time.Now().Before(r.Until) {
		return 0, io.EOF
	}
	var n int
	var rerr error
	err := r.RC.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Read(int(fd), p)
			if rerr != unix.EINTR {
				return true // never wait in the poller
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if rerr == unix.EAGAIN || (n == 0 && rerr == nil) {
		return 0, io.EOF
	}
	if rerr != nil {
		return 0, rerr
	}
	return n, nil
}
