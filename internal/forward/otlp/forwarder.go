// Package otlp ships the aggregator's segment log to an OpenTelemetry
// (OTLP) endpoint, gRPC or HTTP, at least once, the way package
// forward/kafka ships it to Kafka.
//
// The local JSON-lines log is the write-ahead log. A Forwarder reads its
// complete lines in order (segment.Reader), cuts them into batches (at most
// BatchRecords records and BatchBytes bytes, sent once full or Linger
// after their first line, and never across a segment boundary), and
// Concurrency sender goroutines turn each batch into one
// ExportLogsServiceRequest (the mapping is in encode.go and
// docs/records.md) and export it. Package forward/progress tracks the
// acknowledged batches: its durable checkpoint only ever moves to the end
// of the longest prefix of the log whose batches have all been
// acknowledged, so a restart resumes without losing anything and re-sends
// at most what was read after the last checkpoint.
//
// What the endpoint answers decides what happens to a batch:
//
//   - success: acknowledged. A partial success (rejected_log_records) is
//     acknowledged too, as OTLP asks (the server will not take those
//     records, whatever is sent again), and counted with the server's
//     message in records_rejected_total;
//   - a retryable failure (gRPC UNAVAILABLE, RESOURCE_EXHAUSTED with
//     RetryInfo, DEADLINE_EXCEEDED, …; HTTP 429, 502, 503, 504; a refused
//     connection): sent again after the delay the server asked for, or a
//     back-off that doubles up to RetryMax;
//   - the request refused as it is (INVALID_ARGUMENT, RESOURCE_EXHAUSTED
//     without RetryInfo; HTTP 400, 413): sent again in halves, so that
//     one bad record cannot hold the log back; a single record still
//     refused is given up, counted in records_rejected_total and logged;
//   - anything else (authentication, a wrong path, a server error): sent
//     again after a back-off, forever: an operator sees errors_total grow
//     and the lag stay, never a silent gap, and the disk cap
//     (segment.Retainer) holds the writer back rather than delete unsent
//     data.
//
// # Lifetimes and concurrency
//
// New validates the config, loads the checkpoint and registers metrics; it
// does no network I/O. Run is called once; it connects, forwards until its
// context ends, then waits DrainTimeout at most for requests in flight,
// saves the final checkpoint and returns. MayDelete (segment.Retainer),
// Checkpoint, Stats, Lag, CaughtUp and Wake are safe from any goroutine,
// before, during and after Run.
package otlp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/forward/progress"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/seqstamp"
)

// Forwarder ships one segment log to one OTLP endpoint. It implements
// segment.Retainer.
type Forwarder struct {
	lastErrLog atomic.Int64 // unix ns of the last logged export error
	cfg        Config
	m          *fwdMetrics
	p          *progress.Progress
	// The read loop's state: the batch being cut, and a segment the
	// reader entered meanwhile.
	cut           cutter
	pendingMarker segment.Position
	hasMarker     bool

	exported, errs, retries, rejected atomic.Uint64
	ran                               atomic.Bool
}

var _ segment.Retainer = (*Forwarder)(nil)

// Stats is a snapshot of a Forwarder's progress, for tests and ipcbench.
type Stats struct {
	Exported   uint64           // records the endpoint accepted
	Rejected   uint64           // records the endpoint refused for good
	Errors     uint64           // failed export attempts
	Retries    uint64           // requests sent again after a failure
	InFlight   int              // records read and not yet acknowledged
	Acked      segment.Position // end of the acknowledged prefix of the log
	Checkpoint segment.Position // the durable checkpoint
	Reader     segment.ReaderStats
}

// New validates cfg (see Config.Validate), loads the checkpoint and
// registers the forwarder's metrics on reg (nil: not registered).
func New(cfg Config, reg prometheus.Registerer) (*Forwarder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	f := &Forwarder{cfg: cfg}
	var err error
	f.p, err = progress.Open(progress.Config{Name: "otlp", Peer: "the endpoint", From: cfg.From, CheckpointPath: cfg.CheckpointPath,
		CheckpointInterval: cfg.CheckpointInterval, Poll: cfg.Poll, OnSegment: f.enterSegment}, reg)
	if err != nil {
		return nil, err
	}
	if f.m, err = newMetrics(reg); err != nil {
		f.p.Reader.Close()
		return nil, err
	}
	return f, nil
}

// MayDelete reports whether segment seq lies entirely before the durable
// checkpoint (segment.Retainer).
func (f *Forwarder) MayDelete(seq uint64) bool { return f.p.MayDelete(seq) }

// Checkpoint returns the durable checkpoint.
func (f *Forwarder) Checkpoint() segment.Position { return f.p.Checkpoint() }

// CheckpointPath is the file the checkpoint is saved in.
func (f *Forwarder) CheckpointPath() string { return f.p.CheckpointPath() }

// Lag measures how far the forwarder is behind its log.
func (f *Forwarder) Lag() (progress.Lag, error) { return f.p.Lag() }

// CaughtUp reports whether every complete line present in the log has been
// acknowledged.
func (f *Forwarder) CaughtUp() (bool, error) { return f.p.CaughtUp() }

// Wake tells the forwarder new lines were written; an in-process writer
// calls it after each write to cut latency below Config.Poll.
func (f *Forwarder) Wake() { f.p.Reader.Wake() }

// Stats returns a snapshot of the forwarder's counters.
func (f *Forwarder) Stats() Stats {
	acked, inFlight, _ := f.p.Snapshot()
	return Stats{
		Exported: f.exported.Load(), Rejected: f.rejected.Load(), Errors: f.errs.Load(), Retries: f.retries.Load(),
		InFlight: inFlight, Acked: acked, Checkpoint: f.Checkpoint(), Reader: f.p.Reader.Stats(),
	}
}

// ErrAlreadyRan is returned by a second call to Run.
var ErrAlreadyRan = errors.New("otlp forwarder: Run called twice")

// batch is a run of consecutive lines of one segment, exported as one
// request.
type batch struct {
	progress.Span
	lines []byte  // the lines, each ending in '\n'
	sent  []int64 // sent_ns of its --seq stamped lines
}

// Run forwards until ctx ends, then drains (see the package doc). It
// returns nil after a clean shutdown, or the error that stopped it.
func (f *Forwarder) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRan
	}
	defer f.p.Reader.Close()
	exp, err := newExporter(f.cfg)
	if err != nil {
		return err
	}
	defer exp.close()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Requests are sent under pctx: on shutdown, requests in flight get
	// DrainTimeout to be acknowledged.
	pctx, pcancel := progress.DrainContext(ctx, f.cfg.DrainTimeout)
	defer pcancel()

	work := make(chan *batch, f.cfg.Concurrency)
	var senders sync.WaitGroup
	for range f.cfg.Concurrency {
		senders.Go(func() { f.sendLoop(ctx, pctx, exp, work) })
	}
	ckDone := make(chan struct{})
	var ck sync.WaitGroup
	ck.Go(func() { f.p.SaveEvery(ckDone) })

	runErr := f.readLoop(ctx, work)
	cancel()
	close(work)
	senders.Wait()
	pcancel()
	close(ckDone)
	ck.Wait()
	if err := f.p.Save(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// enterSegment is the reader's OnSegment hook (called inside Next, on the
// read loop's goroutine). Without a batch being cut, the checkpoint may
// move to the new segment at once (the writer may be waiting for the old
// one to become deletable); else the batch must end before the segment
// does, so the marker waits in pendingMarker until the batch is pushed.
func (f *Forwarder) enterSegment(pos segment.Position) {
	if f.cut.b == nil {
		f.p.EnterSegment(pos)
		return
	}
	f.pendingMarker, f.hasMarker = pos, true
}

// readLoop cuts the log into batches and hands them to the senders until
// ctx ends or the log fails.
func (f *Forwarder) readLoop(ctx context.Context, work chan<- *batch) error {
	f.cut = cutter{f: f, ctx: ctx, work: work}
	c := &f.cut
	defer c.stopLinger()
	for {
		line, end, err := f.p.Reader.Next(c.readCtx())
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case c.lingered(): // the batch waited long enough: send it
				if !c.push() {
					return nil
				}
				continue
			}
			return fmt.Errorf("otlp forwarder: %w", err)
		}
		if f.hasMarker && !c.push() { // the line opens a new segment: the batch ends with the old one
			return nil
		}
		c.add(line, end)
		if c.b.N >= f.cfg.BatchRecords || len(c.b.lines) >= f.cfg.BatchBytes {
			if !c.push() {
				return nil
			}
		}
	}
}

// cutter is the batch the read loop is cutting, and the linger that ends
// it: a context that a timer cancels Linger after the batch's first line,
// so that a reader waiting for more lines returns and the batch is sent.
type cutter struct {
	f      *Forwarder
	ctx    context.Context
	work   chan<- *batch
	b      *batch
	bctx   context.Context
	cancel context.CancelFunc
	timer  *time.Timer
}

// readCtx is the context of the next read: ctx while no batch is being
// cut, else the batch's linger.
func (c *cutter) readCtx() context.Context {
	if c.bctx != nil {
		return c.bctx
	}
	return c.ctx
}

func (c *cutter) lingered() bool { return c.bctx != nil && c.bctx.Err() != nil }

func (c *cutter) add(line []byte, end segment.Position) {
	if c.b == nil {
		c.b = &batch{Span: progress.Span{ReadNS: time.Now().UnixNano(), RecvNS: recvNS(line)}, lines: getLines()}
		c.bctx, c.cancel = context.WithCancel(c.ctx)
		c.timer = time.AfterFunc(c.f.cfg.Linger, c.cancel)
	}
	b := c.b
	b.lines = append(b.lines, line...)
	b.N++
	b.End = end
	if ns := seqstamp.SentNS(line); ns > 0 {
		b.sent = append(b.sent, ns)
	}
}

func (c *cutter) stopLinger() {
	if c.timer != nil {
		c.timer.Stop()
		c.cancel()
		c.timer, c.bctx, c.cancel = nil, nil, nil
	}
}

// push hands the batch to the senders (after it, a segment marker the
// reader met); false when ctx ended first.
func (c *cutter) push() bool {
	c.stopLinger()
	if b := c.b; b != nil {
		c.b = nil
		c.f.p.Add(&b.Span)
		select {
		case c.work <- b:
		case <-c.ctx.Done():
			return false
		}
	}
	if c.f.hasMarker {
		c.f.hasMarker = false
		c.f.p.EnterSegment(c.f.pendingMarker)
	}
	return true
}

// sendLoop encodes and exports batches until work is closed.
func (f *Forwarder) sendLoop(ctx, pctx context.Context, exp exporter, work <-chan *batch) {
	enc := newLineEncoder(f.cfg.Hostname)
	var req []byte
	for b := range work {
		if ctx.Err() != nil && pctx.Err() != nil {
			continue // past the drain: left for the next start
		}
		if f.send(ctx, pctx, exp, enc, &req, b.lines, b.N) {
			now := time.Now().UnixNano()
			for _, ns := range b.sent {
				f.p.AckLatency(now, ns)
			}
			f.p.Ack(&b.Span)
			putLines(b.lines)
		}
	}
}

// Batches' line buffers are reused: a flat-out log fills one every few
// milliseconds.
var linePool sync.Pool

func getLines() []byte {
	if p, ok := linePool.Get().(*[]byte); ok {
		return (*p)[:0]
	}
	return make([]byte, 0, 64<<10)
}

func putLines(b []byte) {
	if cap(b) <= 8<<20 {
		linePool.Put(&b)
	}
}

// send exports n lines until the endpoint took them, splitting a request
// it refuses as it is; false when the drain ended first.
func (f *Forwarder) send(ctx, pctx context.Context, exp exporter, enc *lineEncoder, req *[]byte, lines []byte, n int) bool {
	backoff := 100 * time.Millisecond
	for {
		enc.reset()
		rest := lines
		for len(rest) > 0 {
			i := bytes.IndexByte(rest, '\n')
			enc.add(rest[:i])
			rest = rest[i+1:]
		}
		*req = enc.request((*req)[:0])
		out := exp.export(pctx, *req)
		if out.err == nil {
			f.m.requestBytes.Add(float64(out.wire))
			ok := int64(n) - out.rejected
			f.exported.Add(uint64(max(ok, 0)))
			f.m.exported.Add(float64(max(ok, 0)))
			if out.rejected > 0 {
				f.reject(int(out.rejected), "partial success: "+out.msg)
			}
			return true
		}
		if pctx.Err() != nil {
			return false
		}
		f.errs.Add(1)
		f.m.errors.Inc()
		f.logError(out.err)
		if out.split {
			if n == 1 {
				f.reject(1, "refused alone: "+out.err.Error())
				return true
			}
			half := n / 2
			cut := 0
			for range half {
				cut += bytes.IndexByte(lines[cut:], '\n') + 1
			}
			return f.send(ctx, pctx, exp, enc, req, lines[:cut], half) &&
				f.send(ctx, pctx, exp, enc, req, lines[cut:], n-half)
		}
		wait := backoff
		if out.delay > 0 {
			wait = min(out.delay, time.Minute)
		} else {
			backoff = min(2*backoff, f.cfg.RetryMax)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false // stopping: what is unacknowledged is sent again on the next start
		}
		f.retries.Add(1)
		f.m.retries.Inc()
	}
}

// reject counts records the endpoint refused for good.
func (f *Forwarder) reject(n int, why string) {
	f.rejected.Add(uint64(n))
	f.m.rejected.Add(float64(n))
	if f.cfg.Log != nil {
		f.cfg.Log.Warn("otlp endpoint rejected records; they are not sent again", "records", n, "why", why)
	}
}

func (f *Forwarder) logError(err error) {
	if now := time.Now().UnixNano(); f.cfg.Log != nil && now-f.lastErrLog.Load() > int64(10*time.Second) {
		f.lastErrLog.Store(now)
		f.cfg.Log.Warn("otlp export failed; retrying (the records stay on disk)", "err", err, "errors_total", f.errs.Load())
	}
}

var recvPath = record.CompilePaths("agg.recv_ns")

// recvNS is a line's agg.recv_ns, or 0.
func recvNS(line []byte) int64 {
	var v [1]record.Value
	recvPath.Find(line, v[:])
	n, _ := v[0].Int()
	return n
}
