// Package pipeline connects listeners to the output: a bounded queue of
// batches and the single writer that drains it.
//
// Listeners encode records into a Batch (already JSON lines) and Submit it.
// Submit blocks while the queue is full: that is the backpressure that stops
// stream listeners from reading, so stream producers block in write(2) and
// nothing is dropped. Datagram listeners block the same way; the kernel then
// drops datagrams for them and counts it (SO_RXQ_OVFL), which they export.
//
// The Writer takes every batch that is waiting (up to a byte budget) and
// writes them with one writev(2), so the number of write syscalls is per
// batch, not per record.
package pipeline

import (
	"context"
	"sync"

	"github.com/ipclab/logagg/internal/metrics"
)

// Batch is a run of encoded JSON lines from one listener.
type Batch struct {
	Buf     []byte // complete JSON lines, each ending in '\n'
	Records int    // number of lines in Buf
	InBytes int    // bytes received for these records (their payloads), for drop counts
	// Origin is the listener whose out-counters the writer advances. nil
	// for a batch of further copies of records routed to several outputs:
	// a record counts for its listener once, where it went first.
	Origin *metrics.Listener
	// Done is called by the writer once every record of Buf is in the
	// output (see Completer); empty for sources that need no word of it.
	Done []Completion
}

// Completer is told how far a source's records are written. The writer
// calls Written after write(2) of the whole batch returned (the records
// survive the aggregator's crash, not the machine's: fsync follows the
// output's own policy), from the writer's goroutine, once per Completion,
// in the order the batches were submitted. A batch that is not written
// whole (given up at the hard stop, dropped at the drain deadline) calls
// nothing. Written must be quick and must not block: it runs between two
// writes of the output.
type Completer interface {
	Written(mark uint64)
}

// Completion is one source's mark in a batch: everything the source put
// into this batch and earlier ones is covered by Mark, whose meaning is the
// source's own (a ring offset, a byte count of a connection).
type Completion struct {
	To   Completer
	Mark uint64
}

// Reset empties b for reuse, keeping its capacity.
func (b *Batch) Reset() {
	b.Buf = b.Buf[:0]
	b.Records = 0
	b.InBytes = 0
	b.Origin = nil
	clear(b.Done)
	b.Done = b.Done[:0]
}

// Submitter is where listeners send batches. Implementations are safe for
// concurrent use.
type Submitter interface {
	// NewBatch returns an empty batch, possibly recycled. The caller owns it
	// until it passes it to Submit.
	NewBatch() *Batch
	// Submit hands b to the writer, which owns it afterwards. It blocks while
	// the queue is full and returns ctx.Err() if ctx ends first; b is then
	// still the caller's. Listeners pass a context that ends only at the hard
	// shutdown deadline, never the one that asks them to stop reading, so a
	// drain is not cut short by its own start.
	Submit(ctx context.Context, b *Batch) error
}

// Queue is a bounded FIFO of batches with a batch pool. It implements
// Submitter.
type Queue struct {
	ch   chan *Batch
	pool sync.Pool
	m    *metrics.Writer
	// batchBytes is the capacity new batches start with.
	batchBytes int
	keepCap    int // largest buffer Recycle keeps (see KeepRecord)

	lostMu sync.Mutex
	lost   Loss // batches refused at the hard stop, or left queued
}

// NewQueue returns a queue holding at most capacity batches. batchBytes is
// the initial buffer size of a batch; listeners flush a batch at about that
// size, so capacity*batchBytes bounds the queued memory.
func NewQueue(capacity, batchBytes int, m *metrics.Writer) *Queue {
	if capacity < 1 {
		capacity = 1
	}
	q := &Queue{ch: make(chan *Batch, capacity), m: m, batchBytes: batchBytes}
	q.pool.New = func() any { return &Batch{Buf: make([]byte, 0, batchBytes)} }
	if m != nil {
		m.QueueCapacity.Set(float64(capacity))
	}
	return q
}

// NewBatch implements Submitter.
func (q *Queue) NewBatch() *Batch { return q.pool.Get().(*Batch) }

// KeepRecord makes the pool keep batch buffers big enough for one record
// of maxRecord bytes (JSON-escaped, plus metadata): a stream of long
// records then reuses a few big buffers instead of allocating one per
// record and leaving the collector to catch up (which showed as RSS well
// above the partial-frame budget). Call before use.
func (q *Queue) KeepRecord(maxRecord int) { q.keepCap = max(q.keepCap, 2*maxRecord+q.batchBytes) }

// Recycle returns a batch to the pool once it has been written.
func (q *Queue) Recycle(b *Batch) {
	if cap(b.Buf) > max(4*q.batchBytes, q.keepCap) { // do not keep an outsized buffer forever
		return
	}
	b.Reset()
	q.pool.Put(b)
}

// Submit implements Submitter.
func (q *Queue) Submit(ctx context.Context, b *Batch) error {
	if b.Records == 0 {
		q.Recycle(b)
		return nil
	}
	select {
	case q.ch <- b:
	default:
		select {
		case q.ch <- b:
		case <-ctx.Done():
			return ctx.Err() // the caller counts what it gives up
		}
	}
	if q.m != nil {
		q.m.QueueDepth.Set(float64(len(q.ch)))
	}
	return nil
}

// TrySubmit hands b to the writer if the queue has room, and reports
// whether it did; b stays the caller's when it did not.
func (q *Queue) TrySubmit(b *Batch) bool {
	if b.Records == 0 {
		q.Recycle(b)
		return true
	}
	select {
	case q.ch <- b:
		if q.m != nil {
			q.m.QueueDepth.Set(float64(len(q.ch)))
		}
		return true
	default:
		return false
	}
}

// DropQueued takes every batch still queued once nothing will write them
// any more (the writer returned at the hard stop while a listener was still
// handing over), counts them as dropped (drain_timeout) and recycles them.
func (q *Queue) DropQueued() {
	for {
		select {
		case b := <-q.ch:
			if q.m != nil {
				q.m.Drop(metrics.CauseDrainTimeout, b.Records, b.InBytes)
			}
			if b.Origin != nil { // a batch of further copies counts for the output alone
				b.Origin.Drop(metrics.CauseDrainTimeout, b.Records)
				b.Origin.DropBytes(metrics.CauseDrainTimeout, b.InBytes)
				q.lostMu.Lock()
				q.lost.Add(Loss{Records: int64(b.Records), Bytes: int64(b.InBytes)})
				q.lostMu.Unlock()
			}
			q.Recycle(b)
		default:
			return
		}
	}
}

// Lost is what was handed over but never reached the writer: the batches
// DropQueued took (drain_timeout), in records and received bytes.
func (q *Queue) Lost() Loss {
	q.lostMu.Lock()
	defer q.lostMu.Unlock()
	return q.lost
}

// Len is the number of queued batches.
func (q *Queue) Len() int { return len(q.ch) }
