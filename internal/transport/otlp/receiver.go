package otlp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/bufpool"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
)

// receiver is what the gRPC and HTTP servers share: the decoders, the
// Emitters, the budget of bytes in flight and the counters of what was
// refused.
type receiver struct {
	url string
	d   transport.Deps
	p   Params

	// room holds max_inflight: the bytes of requests being received (their
	// size if known, else max_request) or admitted and not yet written.
	room *budget.Gate

	// bodies lends the buffers requests are read into, and keeps free
	// ones only in the room of max_inflight that those lent leave: the
	// free ones add nothing to what bodies may hold.
	bodies *bufpool.Bounded

	decoders sync.Pool
	emitters chan *sink.Emitter // idle Emitters (an Emitter serves one request at a time)
}

func newReceiver(url string, d transport.Deps, p Params) *receiver {
	r := &receiver{url: url, d: d, p: p, emitters: make(chan *sink.Emitter, 64), room: budget.NewGate(int64(p.MaxInflight))}
	r.decoders.New = func() any { return &Decoder{MaxRecord: d.Opts.MaxRecord} }
	mem := d.Memory()
	r.bodies = bufpool.NewBounded(int64(p.MaxInflight), func(lent, kept int64) {
		mem.Add(metrics.MemOTLPBodies, lent)
		mem.Add(metrics.MemOTLPBodiesFree, kept)
	})
	return r
}

// refuse counts a request refused whole, with its cause.
func (r *receiver) refuse(cause string) {
	if m := r.d.Metrics; m != nil && m.Root() != nil {
		m.Root().RequestsRefused.WithLabelValues(r.url, cause).Inc()
	}
}

// reject counts records left out of an accepted request.
func (r *receiver) reject(cause string, n int) {
	if m := r.d.Metrics; m != nil && m.Root() != nil && n > 0 {
		m.Root().RecordsRejected.WithLabelValues(r.url, cause).Add(float64(n))
	}
}

// refusal is why a request was not accepted; the servers turn it into
// their protocol's status.
type refusal struct {
	cause string
	msg   string
}

func (e *refusal) Error() string { return e.msg }

// result is an accepted request's answer: the records rejected from it.
type result struct {
	rejected int
	msg      string
}

// completion learns that a request's records are written (or dropped on
// purpose by a rule): it gives the budget back and, in the acknowledged
// mode, wakes the request.
type completion struct {
	r    *receiver
	n    int64
	done chan struct{} // nil unless acknowledged
	once atomic.Bool
}

// Written implements pipeline.Completer (called by the output's writer).
func (c *completion) Written(uint64) { c.release() }

func (c *completion) release() {
	if !c.once.CompareAndSwap(false, true) {
		return
	}
	c.r.room.Give(c.n)
	if c.done != nil {
		close(c.done)
	}
}

func (r *receiver) emitter() *sink.Emitter {
	select {
	case e := <-r.emitters:
		return e
	default:
		return r.d.Sink.Emitter(r.d.Metrics)
	}
}

func (r *receiver) putEmitter(e *sink.Emitter) {
	select {
	case r.emitters <- e:
	default:
		e.Release()
	}
}

// releaseEmitters ends the idle Emitters (Run's end).
func (r *receiver) releaseEmitters() {
	for {
		select {
		case e := <-r.emitters:
			e.Release()
		default:
			return
		}
	}
}

// admitWait bounds how long a request waits for room in max_inflight
// before it is refused for backpressure: requests are received in
// milliseconds, so a short wait rides over a burst of them, while a full
// output refuses soon enough for the client to back off.
const admitWait = time.Second

// admit reserves n bytes of max_inflight for a request about to be
// received: its size when known (an uncompressed HTTP body), else
// max_request. Bodies being received are held in memory as much as those
// waiting to be written: without this, any number of them could be read
// at once. A refusal is counted; ingest takes the reservation over.
func (r *receiver) admit(ctx context.Context, n int) *refusal {
	if !r.room.TryTake(int64(n)) {
		wctx, cancel := context.WithTimeout(ctx, min(admitWait, r.p.Timeout))
		defer cancel()
		if !r.room.Take(wctx.Done(), int64(n), nil) {
			return r.full()
		}
	}
	return nil
}

// full counts and returns the refusal of a request that found no room in
// max_inflight.
func (r *receiver) full() *refusal {
	r.refuse(CauseBackpressure)
	return &refusal{CauseBackpressure, fmt.Sprintf("logagg: %d bytes of requests are being received or waiting to be written (max_inflight); retry later", r.p.MaxInflight)}
}

// unadmit gives back a reservation whose request was not ingested.
func (r *receiver) unadmit(n int) { r.room.Give(int64(n)) }

// ingest hands the records of one request (body: a protobuf
// ExportLogsServiceRequest, wire bytes received for it) to the sink and
// says what to answer: a refusal, or the records rejected. It returns
// once the records are in the outputs' queues, or, in the acknowledged
// mode, written (or ctx ended first: then a refusal, and the records are
// written anyway, which a client that retries sees twice).
//
// held is what admit reserved for the request: the request keeps
// len(body) of it until its records are written, and the rest goes back
// (a JSON body turned into protobuf may even take a little more).
func (r *receiver) ingest(ctx context.Context, body []byte, wire int, info *connInfo, held int) (result, *refusal) {
	n := int64(len(body))
	r.room.Give(int64(held) - n)
	dec := r.decoders.Get().(*Decoder)
	defer r.decoders.Put(dec)
	if err := dec.Decode(body); err != nil {
		r.room.Give(n)
		cause := CauseMalformed
		var de *DecodeError
		if errors.As(err, &de) {
			cause = de.Cause
		}
		r.refuse(cause)
		return result{}, &refusal{cause, "logagg: " + err.Error()}
	}
	res := result{rejected: dec.Rejected, msg: dec.RejectMsg}
	r.reject(CauseRecordSize, dec.Rejected)
	if dec.Len() == 0 {
		r.room.Give(n)
		e := r.emitter()
		e.Received(wire)
		e.Flush()
		r.putEmitter(e)
		return res, nil
	}
	c := &completion{r: r, n: n}
	if r.p.Ack == AckWritten {
		c.done = make(chan struct{})
	}
	meta := info.meta // the prepared part is shared, read-only
	meta.RecvNS = time.Now().UnixNano()
	e := r.emitter()
	e.Received(wire)
	stopped := false
	for i := range dec.Len() {
		p, fl := dec.Payload(i)
		// Past the hard stop Emit counts each record dropped: every record
		// of the request is counted, none discarded unseen.
		if !e.Emit(p, &meta, fl) {
			stopped = true
		}
	}
	if !stopped {
		e.Done(pipeline.Completion{To: c, Mark: 1})
	}
	err := e.Flush()
	r.putEmitter(e)
	if stopped || err != nil {
		// The hard stop: the records are counted dropped (drain_timeout)
		// by the sink, and the completion will never come.
		c.release()
		r.refuse(CauseStopping)
		return result{}, &refusal{CauseStopping, "logagg: shutting down; retry"}
	}
	if c.done != nil {
		select {
		case <-c.done:
		case <-ctx.Done():
			r.refuse(CauseNotWritten)
			return result{}, &refusal{CauseNotWritten, "logagg: the request ended before its records were written"}
		}
	}
	return res, nil
}
