package pipeline

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
)

// Output is where the writer puts batches: the segment log in production,
// a memory buffer in tests.
type Output interface {
	// WriteBuffers writes bufs (whole JSON lines) with one write syscall
	// where possible and applies the durability policy. After a failure
	// the bytes it reports written end at a line boundary (only whole
	// records are appended), so a retry resumes at a record.
	WriteBuffers(bufs [][]byte) (int64, error)
	// Tick is called about every 100 ms so time-based policies can act
	// while no batches arrive.
	Tick() error
	// Reopen reopens the output file (SIGHUP).
	Reopen() error
}

// Stager is an Output that holds a buffer the size of its largest recent
// write (the segment log's O_DIRECT staging blocks). Staged is its size;
// Unstage gives it up, down to its minimum, once the writer needs the room.
// Both are called from the writer's goroutine.
type Stager interface {
	Staged() int64
	Unstage()
}

// Writer is the single consumer of a Queue.
type Writer struct {
	q        *Queue
	out      Output
	m        *metrics.Writer
	log      *slog.Logger
	maxBytes int // gather at most this many bytes into one write

	// room, when set, is the writes' share of the memory budget, shared by
	// the writers of every output: what each gathers for a write and what
	// its output stages are held against it. A writer gathers up to floor
	// bytes whatever room holds (its own part of the share) and past that
	// only while room has some left, so that an output that is busy while
	// others are idle writes as much at a time as a lone one would.
	room    *budget.Gate
	floor   int
	stager  Stager // out, if it stages
	charged int64  // gathered bytes held against room
	staged  int64  // the output's staged bytes held against room
	wrote   bool   // a write since the last tick

	closeOnce sync.Once
	closed    chan struct{} // Close: no more batches will be submitted
	reopen    chan request

	hardStop context.Context
	pending  []*Batch
	bufs     [][]byte
	lost     Loss // records given up at the hard stop (write_error)
	written  atomic.Int64
}

// request is work for the writer's goroutine (Apply).
type request struct {
	f   func() error
	res chan error
}

// Loss is a count of records, and of the bytes received for them (their
// payloads), that were accepted and will never be written.
type Loss struct {
	Records int64
	Bytes   int64
}

// Add adds n to l.
func (l *Loss) Add(n Loss) { l.Records += n.Records; l.Bytes += n.Bytes }

// NewWriter returns a writer draining q into out. maxBytes bounds how much
// one write gathers (0 = 4 MiB).
func NewWriter(q *Queue, out Output, m *metrics.Writer, log *slog.Logger, maxBytes int) *Writer {
	if maxBytes <= 0 {
		maxBytes = 4 << 20
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = metrics.NewWriter(metrics.MainOutput)
	}
	return &Writer{q: q, out: out, m: m, log: log, maxBytes: maxBytes,
		closed: make(chan struct{}), reopen: make(chan request)}
}

// ShareRoom makes the writer hold what it gathers and what its output
// stages against room, gathering past floor bytes only while room has some
// left (see Writer.room). Call before Run.
func (w *Writer) ShareRoom(room *budget.Gate, floor int) {
	w.room, w.floor = room, min(max(floor, 1), w.maxBytes)
	w.stager, _ = w.out.(Stager)
}

// Lost is what the writer gave up on at the hard stop because the output
// could not be written (metrics: dropped_total{cause="write_error"}). Read
// it after Run returned.
func (w *Writer) Lost() Loss { return w.lost }

// Written is the number of records written so far. Safe for concurrent use.
func (w *Writer) Written() int64 { return w.written.Load() }

// Close tells the writer that every producer of batches has stopped; Run
// then writes what is queued and returns. Safe to call more than once.
func (w *Writer) Close() { w.closeOnce.Do(func() { close(w.closed) }) }

// Reopen asks the running writer to reopen its output between two writes
// and waits for the result.
func (w *Writer) Reopen(ctx context.Context) error { return w.Apply(ctx, w.out.Reopen) }

// Apply runs f in the running writer's goroutine between two writes (a
// reload reconfiguring the output) and waits for its result.
func (w *Writer) Apply(ctx context.Context, f func() error) error {
	res := make(chan error, 1)
	select {
	case w.reopen <- request{f: f, res: res}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run writes batches until Close has been called and the queue is empty, or
// until hardStop ends (then whatever is still queued is written first, since
// it is already in memory and writing it is cheap).
//
// A failed write (disk full, EIO) is retried every second with the bytes not
// yet written, like rsyslog suspending an action: the queue fills, stream
// producers block, and nothing is dropped. Only at the hard stop does the
// writer give up; those records are counted as write_error drops.
func (w *Writer) Run(hardStop context.Context) error {
	w.hardStop = hardStop
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	defer w.leaveRoom()
	for {
		select {
		case b := <-w.q.ch:
			w.take(b)
			w.gather()
			w.flush()
		case <-tick.C:
			if err := w.out.Tick(); err != nil {
				w.log.Error("output tick", "err", err)
			}
			w.restage(!w.wrote, 0)
			w.wrote = false
		case r := <-w.reopen:
			r.res <- r.f()
		case <-w.closed:
			w.drain()
			return nil
		case <-hardStop.Done():
			w.drain()
			return nil
		}
	}
}

// take adds b, just received from the queue, to the next write.
func (w *Writer) take(b *Batch) {
	w.q.took(b)
	w.pending = append(w.pending, b)
	if w.room != nil {
		w.room.Charge(int64(len(b.Buf)))
		w.charged += int64(len(b.Buf))
	}
}

// gather takes every batch already waiting, up to the byte budget, so that
// one writev carries them all.
func (w *Writer) gather() {
	size := 0
	for _, b := range w.pending {
		size += len(b.Buf)
	}
	for size < w.maxBytes && w.mayGather(size) {
		select {
		case b := <-w.q.ch:
			w.take(b)
			size += len(b.Buf)
		default:
			return
		}
	}
}

// mayGather reports whether a write of size bytes gathered so far may take
// another batch: below the floor always, past it while the shared room
// has some left.
func (w *Writer) mayGather(size int) bool {
	return w.room == nil || size < w.floor || w.room.Held() < w.room.Limit()
}

// leaveRoom gives back what the writer holds in room when it stops (its
// output is closed after it: a retired output's stage is not the others').
func (w *Writer) leaveRoom() {
	if w.room != nil {
		w.room.Give(w.charged + w.staged)
		w.charged, w.staged = 0, 0
	}
}

// restage follows the output's staging buffer in room after a write of
// last bytes (0: a tick). A stage keeps the size of the largest write; it
// is given up when the output idles (a tick with nothing written since the
// last), and when room is over its limit and the stage is more than twice
// what this write needed: an output that must now share should not hold
// what it took alone, and one writing about as much as its stage keeps it
// rather than allocating it again for every write.
func (w *Writer) restage(idle bool, last int64) {
	st := w.stager
	if st == nil {
		return
	}
	if n := st.Staged(); n > int64(w.floor) && (idle || w.room.Held() > w.room.Limit() && n > 2*max(last, int64(w.floor))) {
		st.Unstage()
	}
	n := st.Staged()
	if d := n - w.staged; d > 0 {
		w.room.Charge(d)
	} else if d < 0 {
		w.room.Give(-d)
	}
	w.staged = n
}

func (w *Writer) drain() {
	for {
		w.gather()
		if len(w.pending) == 0 {
			return
		}
		w.flush()
	}
}

func (w *Writer) flush() {
	if len(w.pending) == 0 {
		return
	}
	w.bufs = w.bufs[:0]
	records := 0
	for _, b := range w.pending {
		w.bufs = append(w.bufs, b.Buf)
		records += b.Records
	}
	n, err := w.writeRetrying(w.bufs)
	written := n
	w.m.QueueDepth.Set(float64(w.q.Len()))
	if err == nil {
		w.m.BatchRecords.Observe(float64(records))
		w.m.BatchBytes.Observe(float64(n))
	}
	before := w.lost
	// n counts whole lines only (Output's contract after a failure), so
	// each record is either in the file or lost, and counted as such.
	for i, b := range w.pending {
		in := int64(len(b.Buf))
		outRecords := b.Records
		if n < in {
			in, outRecords = max(n, 0), bytes.Count(b.Buf[:max(n, 0)], newline)
		}
		n -= int64(len(b.Buf))
		if lostRecords := b.Records - outRecords; lostRecords > 0 {
			// Dropped bytes are received bytes, as for every cause: the
			// lost records' share of the batch's.
			lostBytes := int64(b.InBytes) * int64(lostRecords) / int64(b.Records)
			w.m.Drop(metrics.CauseWriteError, lostRecords, int(lostBytes))
			if b.Origin != nil { // a batch of further copies counts for the output alone
				w.lost.Add(Loss{Records: int64(lostRecords), Bytes: lostBytes})
				b.Origin.Drop(metrics.CauseWriteError, lostRecords)
				b.Origin.DropBytes(metrics.CauseWriteError, int(lostBytes))
			}
		}
		w.written.Add(int64(outRecords))
		if outRecords > 0 {
			w.m.Records.Add(float64(outRecords))
			w.m.Bytes.Add(float64(in))
			if b.Origin != nil {
				b.Origin.RecordsOut.Add(float64(outRecords))
				b.Origin.BytesOut.Add(float64(in))
			}
		}
		if outRecords == b.Records {
			for _, c := range b.Done {
				c.To.Written(c.Mark)
			}
		}
		w.q.Recycle(b)
		w.pending[i] = nil
	}
	w.pending = w.pending[:0]
	clear(w.bufs)
	w.wrote = true
	if w.room != nil {
		w.room.Give(w.charged)
		w.charged = 0
		w.restage(false, written)
	}
	if err != nil {
		w.log.Error("write output: giving up at the hard stop", "err", err,
			"records_lost", w.lost.Records-before.Records, "bytes_lost", w.lost.Bytes-before.Bytes)
	}
}

var newline = []byte{'\n'}

// writeRetrying writes bufs, retrying what is left after a failure once a
// second until it succeeds or the hard stop ends.
func (w *Writer) writeRetrying(bufs [][]byte) (int64, error) {
	var total int64
	for attempt := 0; ; attempt++ {
		n, err := w.out.WriteBuffers(bufs)
		total += n
		if err == nil {
			return total, nil
		}
		if attempt == 0 {
			w.log.Error("write output failed; retrying every second (producers are held back meanwhile)", "err", err)
		}
		bufs = skipBytes(bufs, n)
		select {
		case <-w.hardStop.Done():
			return total, err
		case <-time.After(time.Second):
		}
	}
}

// skipBytes drops the first n bytes of bufs, modifying bufs in place.
func skipBytes(bufs [][]byte, n int64) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n >= int64(len(bufs[0])) {
			n -= int64(len(bufs[0]))
			bufs = bufs[1:]
		} else {
			bufs[0] = bufs[0][n:]
			n = 0
		}
	}
	return bufs
}
