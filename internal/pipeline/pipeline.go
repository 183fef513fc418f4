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
	"math/bits"
	"sync"

	"github.com/ipclab/logagg/internal/budget"
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

	counted int // capacity of Buf as the queue's memory counts it
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
//
// It is bounded in bytes: the capacity of the buffers of the batches it
// holds, whatever their number, so that its memory is what it was given
// however records arrive (a round of seven records or one record of
// 256 KiB). A batch handed over less than half full is copied into a
// buffer of its own size first, and the big buffer goes back to the pool
// for the next batch: an input that reads a little per round (a TCP
// connection read as soon as each segment arrives) fills the queue with
// small buffers, not with mostly empty 64 KiB ones.
type Queue struct {
	ch   chan *Batch
	pool sync.Pool // *Batch, its Buf nil
	full sync.Pool // *[]byte of capacity batchBytes..keepCap
	m    *metrics.Writer
	mem  *metrics.Memory
	// batchBytes is the capacity new batches start with.
	batchBytes int
	keepCap    int // largest buffer Recycle keeps (see KeepRecord)

	// room bounds the bytes of the buffers queued.
	room *budget.Gate

	lostMu sync.Mutex
	lost   Loss // batches refused at the hard stop, or left queued
}

// smallBufs pools the buffers that small batches are copied into, by
// power-of-two size class from minSmall up.
var smallBufs [16]sync.Pool

const minSmall = 1 << 10

func smallClass(n int) int { return max(bits.Len(uint(n-1)), bits.Len(minSmall-1)) }

// NewQueue returns a queue of at most capacity batches of batchBytes (the
// initial buffer size of a batch; listeners hand a batch over at about that
// size): capacity*batchBytes bytes of buffers.
func NewQueue(capacity, batchBytes int, m *metrics.Writer) *Queue {
	return NewQueueBytes(int64(max(capacity, 1))*int64(batchBytes), batchBytes, m)
}

// NewQueueBytes returns a queue holding batches whose buffers take at most
// limit bytes (one batch bigger than that is let through alone).
func NewQueueBytes(limit int64, batchBytes int, m *metrics.Writer) *Queue {
	limit = max(limit, int64(batchBytes))
	// The channel only orders batches; the byte limit bounds them. Its
	// capacity is what the limit holds of the smallest buffers.
	slots := int(min(max(limit/minSmall, 16), 1<<16))
	q := &Queue{ch: make(chan *Batch, slots), m: m, batchBytes: batchBytes, room: budget.NewGate(limit)}
	q.pool.New = func() any { return &Batch{} }
	if m != nil {
		m.QueueCapacity.Set(float64(limit / int64(batchBytes)))
		q.mem = m.Memory()
	}
	return q
}

// Limit is the bytes of buffers the queue holds at most.
func (q *Queue) Limit() int64 { return q.room.Limit() }

// Bytes is the bytes of the buffers of the queued batches.
func (q *Queue) Bytes() int64 { return q.room.Held() }

// NewBatch implements Submitter.
func (q *Queue) NewBatch() *Batch {
	b := q.pool.Get().(*Batch)
	if p, ok := q.full.Get().(*[]byte); ok {
		b.Buf = (*p)[:0]
	} else {
		b.Buf = make([]byte, 0, q.batchBytes)
	}
	b.counted = cap(b.Buf)
	q.mem.Add(metrics.MemOpenBatches, int64(b.counted))
	return b
}

// recount counts b's buffer as it is now (appends may have grown it).
func (q *Queue) recount(b *Batch) {
	if c := cap(b.Buf); c != b.counted {
		q.mem.Add(metrics.MemOpenBatches, int64(c-b.counted))
		b.counted = c
	}
}

// KeepRecord makes the pool keep batch buffers big enough for one record
// of maxRecord bytes (JSON-escaped, plus metadata): a stream of long
// records then reuses a few big buffers instead of allocating one per
// record and leaving the collector to catch up (which showed as RSS well
// above the partial-frame budget). Call before use.
func (q *Queue) KeepRecord(maxRecord int) { q.keepCap = max(q.keepCap, 2*maxRecord+q.batchBytes) }

// Recycle returns a batch to the pool once it has been written.
func (q *Queue) Recycle(b *Batch) {
	q.mem.Add(metrics.MemOpenBatches, -int64(b.counted))
	b.counted = 0
	buf := b.Buf[:0]
	b.Buf = nil
	b.Reset()
	q.pool.Put(b)
	switch c := cap(buf); {
	case c >= q.batchBytes && c <= max(4*q.batchBytes, q.keepCap):
		q.full.Put(&buf)
	case c < q.batchBytes && c >= minSmall && c&(c-1) == 0:
		smallBufs[smallClass(c)].Put(&buf)
	}
	// Anything else (an outsized buffer) is left to the collector.
}

// shrink copies a batch that is less than half full into a buffer of its
// own size class, and pools the big one for the next NewBatch.
func (q *Queue) shrink(b *Batch) {
	n := len(b.Buf)
	c := smallClass(n)
	if size := 1 << c; c >= len(smallBufs) || size > cap(b.Buf)/2 || size >= q.batchBytes {
		return
	}
	var nb []byte
	if p, ok := smallBufs[c].Get().(*[]byte); ok {
		nb = (*p)[:n]
	} else {
		nb = make([]byte, n, 1<<c)
	}
	copy(nb, b.Buf)
	big := b.Buf[:0]
	b.Buf = nb
	q.recount(b)
	if cap(big) >= q.batchBytes && cap(big) <= max(4*q.batchBytes, q.keepCap) {
		q.full.Put(&big)
	}
}

func (q *Queue) depth() {
	if q.m != nil {
		q.m.QueueDepth.Set(float64(len(q.ch)))
	}
}

// took accounts for a batch the writer took off the queue.
func (q *Queue) took(b *Batch) {
	q.room.Give(int64(b.counted))
	q.mem.Add(metrics.MemQueuedBatches, -int64(b.counted))
	q.mem.Add(metrics.MemOpenBatches, int64(b.counted))
}

// enqueue counts n bytes (a batch about to be sent, its room taken) as
// queued, or, with n negative, takes them back (the send failed). It runs
// before the send: once sent, the batch is the writer's.
func (q *Queue) enqueue(n int64) {
	q.mem.Add(metrics.MemOpenBatches, -n)
	q.mem.Add(metrics.MemQueuedBatches, n)
}

// Submit implements Submitter.
func (q *Queue) Submit(ctx context.Context, b *Batch) error {
	if b.Records == 0 {
		q.Recycle(b)
		return nil
	}
	q.recount(b)
	if len(b.Buf) < cap(b.Buf)/2 {
		q.shrink(b)
	}
	n := int64(b.counted)
	if !q.room.Take(ctx.Done(), n, nil) {
		return ctx.Err() // the caller counts what it gives up
	}
	q.enqueue(n)
	select {
	case q.ch <- b:
	default:
		select {
		case q.ch <- b:
		case <-ctx.Done():
			q.enqueue(-n)
			q.room.Give(n)
			return ctx.Err()
		}
	}
	q.depth()
	return nil
}

// TrySubmit hands b to the writer if the queue has room, and reports
// whether it did; b stays the caller's when it did not.
func (q *Queue) TrySubmit(b *Batch) bool {
	if b.Records == 0 {
		q.Recycle(b)
		return true
	}
	q.recount(b)
	if len(b.Buf) < cap(b.Buf)/2 {
		q.shrink(b)
	}
	n := int64(b.counted)
	if !q.room.TryTake(n) {
		return false
	}
	q.enqueue(n)
	select {
	case q.ch <- b:
		q.depth()
		return true
	default:
		q.enqueue(-n)
		q.room.Give(n)
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
			q.took(b)
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
