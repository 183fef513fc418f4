package stream

import (
	"errors"
	"io"
	"sync"
	"syscall"
	"time"

	"github.com/ipclab/logagg/internal/framing"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
	"golang.org/x/sys/unix"
)

// readSize is the size of the read buffer. One read of this size usually
// fills one batch at high rates; a longer frame grows the buffer up to the
// maximum record size plus room for an octet-count header.
const readSize = 64 << 10

var bufPool = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// Reader splits one byte stream into records (package framing) and submits
// them in batches. It keeps an incomplete trailing frame between calls of
// ReadFrom, so a caller can switch sources (e.g. from a blocking to a
// draining read of the same fd) without losing or splitting a record. See
// the package doc.
type Reader struct {
	meta   *record.Meta
	out    *sink.Emitter
	frame  framing.Stream
	maxBuf int

	bufp       *[]byte // pooled read buffer, nil once grown or released
	buf        []byte
	mem        *metrics.Memory // counts buf
	start, end int             // unconsumed bytes are buf[start:end]

	err error // sticky: the hard stop ended a hand-over, the reader stopped

	// StalePartial > 0 ends an incomplete frame that waited this long
	// before more bytes came: it is written flagged partial, and the new
	// bytes start a new frame. Set by sources shared by unrelated writers
	// (a FIFO), where a writer that left half a line would otherwise glue
	// the next writer's record onto it.
	StalePartial time.Duration
	heldSince    time.Time // when the held incomplete frame was last added to
}

// NewReader returns a Reader that encodes with meta (already Prepared; the
// Reader sets meta.RecvNS once per read) into an Emitter of d.Sink.
// octetCounting enables RFC 6587 octet-counted frames.
func NewReader(meta *record.Meta, d transport.Deps, octetCounting bool) *Reader {
	maxRecord := d.Opts.MaxRecord
	if maxRecord <= 0 {
		maxRecord = transport.DefaultOptions().MaxRecord
	}
	bufp := bufPool.Get().(*[]byte)
	mem := d.Memory()
	mem.Add(metrics.MemReadBuffers, int64(len(*bufp)))
	return &Reader{
		meta:   meta,
		out:    d.Sink.Emitter(d.Metrics),
		frame:  framing.Stream{MaxRecord: maxRecord, Octet: octetCounting},
		maxBuf: max(readSize, maxRecord+framing.OctetHeaderMax+1),
		bufp:   bufp,
		buf:    *bufp,
		mem:    mem,
	}
}

// Serve reads src until EOF or a read error, submits every record (the last
// unterminated frame flagged partial) and returns nil at EOF, otherwise the
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
// incomplete trailing frame stays buffered for the next ReadFrom or Finish.
// It returns the read error (nil for io.EOF, then the hand-over's error if
// the hard stop ended one).
func (r *Reader) ReadFrom(src io.Reader) (int64, error) {
	var total int64
	// Past the hard stop the source is still read to its end (sources
	// bound that: a drain reads what is buffered, within a grace period),
	// and the sink counts every record as dropped.
	for {
		r.makeRoom()
		n, err := src.Read(r.buf[r.end:])
		if n > 0 {
			now := time.Now()
			r.meta.RecvNS = now.UnixNano()
			if r.StalePartial > 0 && r.start < r.end && now.Sub(r.heldSince) > r.StalePartial {
				// The held frame's writer went quiet mid-frame: end it
				// before the new bytes, which are someone else's.
				newEnd := r.end + n
				r.process(true)
				r.start, r.end = r.end, newEnd
			} else {
				r.end += n
			}
			r.out.Received(n)
			total += int64(n)
			r.process(false)
			if r.start < r.end {
				r.heldSince = now
			}
		}
		// Nothing complete is left in the buffer: submit before a read
		// that may block, so a quiet producer's records are not held back.
		r.flush()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return total, r.err
			}
			// The read error first: a caller tells a deadline (time to
			// drain) from a failure by it. Finish reports the hand-over's.
			return total, err
		}
	}
}

// Finish ends the stream: a buffered incomplete frame is submitted flagged
// partial, and the last batch is submitted. It returns the submit error if
// the hard stop ended first; the records are then counted as dropped.
func (r *Reader) Finish() error {
	r.process(true)
	r.flush()
	r.start, r.end = 0, 0
	r.frame.Reset()
	return r.err
}

// Release returns the read buffer to the pool. The Reader must not be used
// afterwards.
func (r *Reader) Release() {
	r.out.Release()
	r.mem.Add(metrics.MemReadBuffers, -int64(len(r.buf)))
	if r.bufp != nil {
		bufPool.Put(r.bufp)
		r.bufp = nil
	}
	r.buf = nil
}

// makeRoom moves unconsumed bytes to the front and grows the buffer when
// one incomplete frame fills it. The framer never waits for more than
// maxBuf bytes, so the buffer never has to grow past it.
func (r *Reader) makeRoom() {
	if r.start == r.end {
		r.start, r.end = 0, 0
	} else if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end < len(r.buf) || len(r.buf) >= r.maxBuf {
		return
	}
	nb := make([]byte, min(2*len(r.buf), r.maxBuf))
	r.mem.Add(metrics.MemReadBuffers, int64(len(nb)-len(r.buf)))
	copy(nb, r.buf[:r.end])
	if r.bufp != nil { // the pooled buffer is free again
		bufPool.Put(r.bufp)
		r.bufp = nil
	}
	r.buf = nb
}

// process consumes every complete frame in the buffer. At eof it also
// consumes the incomplete rest.
func (r *Reader) process(eof bool) {
	for r.start < r.end {
		n, payload, flags, emit := r.frame.Next(r.buf[r.start:r.end], eof)
		if n == 0 {
			return
		}
		r.start += n
		if emit {
			r.emit(payload, flags)
		}
	}
}

// emit hands one record to the sink.
func (r *Reader) emit(payload []byte, fl record.Flags) {
	if !r.out.Emit(payload, r.meta, fl) {
		r.err = r.out.Err()
	}
}

// flush hands the records read so far to the pipeline. A failed hand-over
// (the hard stop ended) stops the reader; what it held is counted as
// dropped.
func (r *Reader) flush() {
	if err := r.out.Flush(); err != nil {
		r.err = err
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
