// Package kafka ships the aggregator's segment log into Apache Kafka with
// franz-go, at least once.
//
// The local JSON-lines log is the write-ahead log. A Forwarder reads its
// complete lines in order, produces each line as one Kafka record (the
// trailing '\n' removed) with an idempotent producer and acks=all, and
// tracks which records Kafka acknowledged with package forward/progress,
// whose durable checkpoint only ever moves to the end of the longest
// prefix of the log whose records have all been acknowledged: a restart
// resumes without losing anything and re-sends at most what was read
// after the last checkpoint.
//
// A produce that fails (kgo gives up only on errors it cannot retry) is
// counted and produced again after a back-off, not dropped: an operator
// sees errors_total grow and the lag stay, never a silent gap.
//
// # Lifetimes and concurrency
//
// New validates the config, loads the checkpoint and registers metrics; it
// does no network I/O. Run is called once; it connects, forwards until its
// context ends, then flushes in-flight records for at most DrainTimeout,
// saves the final checkpoint and returns. MayDelete (segment.Retainer),
// Checkpoint, Stats and Wake are safe from any goroutine, before, during and
// after Run.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ipclab/logagg/internal/forward/progress"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/seqstamp"
)

// Forwarder ships one segment log to one Kafka topic. It implements
// segment.Retainer.
type Forwarder struct {
	lastErrLog atomic.Int64 // unix ns of the last logged produce error
	cfg        Config
	m          *fwdMetrics
	p          *progress.Progress
	retry      retryQueue

	produced, errs, retries atomic.Uint64
	ran                     atomic.Bool
}

var _ segment.Retainer = (*Forwarder)(nil)

// Stats is a snapshot of a Forwarder's progress, for tests and ipcbench.
type Stats struct {
	Produced   uint64           // records Kafka acknowledged
	Errors     uint64           // failed produce attempts
	Retries    uint64           // records produced again after a failure
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
	f.retry.ready = make(chan struct{}, 1)
	var err error
	f.p, err = progress.Open(progress.Config{Name: "kafka", Peer: "Kafka", From: cfg.From, CheckpointPath: cfg.CheckpointPath,
		CheckpointInterval: cfg.CheckpointInterval, Poll: cfg.Poll}, reg)
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
// acknowledged (aggregator forward --once stops there).
func (f *Forwarder) CaughtUp() (bool, error) { return f.p.CaughtUp() }

// Wake tells the forwarder new lines were written; an in-process writer
// calls it after each write to cut latency below Config.Poll.
func (f *Forwarder) Wake() { f.p.Reader.Wake() }

// Stats returns a snapshot of the forwarder's counters.
func (f *Forwarder) Stats() Stats {
	acked, inFlight, _ := f.p.Snapshot()
	return Stats{
		Produced:   f.produced.Load(),
		Errors:     f.errs.Load(),
		Retries:    f.retries.Load(),
		InFlight:   inFlight,
		Acked:      acked,
		Checkpoint: f.Checkpoint(),
		Reader:     f.p.Reader.Stats(),
	}
}

// ErrAlreadyRan is returned by a second call to Run.
var ErrAlreadyRan = errors.New("kafka forwarder: Run called twice")

// Run forwards until ctx ends, then drains (see the package doc). It
// returns nil after a clean shutdown, or the error that stopped it.
func (f *Forwarder) Run(ctx context.Context) error {
	if !f.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRan
	}
	defer f.p.Reader.Close()
	opts, err := f.cfg.clientOpts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("kafka forwarder: %w", err)
	}
	defer cl.Close()

	// ctx ends the run; so does a read error (cancel), which must also
	// stop the retrier.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// Records are produced under pctx: on shutdown, records already
	// buffered get DrainTimeout to be acknowledged (and a Produce blocked
	// on a full buffer that long to return).
	pctx, pcancel := progress.DrainContext(ctx, f.cfg.DrainTimeout)
	defer pcancel()

	// A failed record goes to the retrier, which produces it again; doing
	// that inside the promise could block kgo's promise goroutine on a full
	// buffer.
	var wg sync.WaitGroup
	wg.Add(2)
	ckDone := make(chan struct{})
	go func() { defer wg.Done(); f.p.SaveEvery(ckDone) }()
	go func() { defer wg.Done(); f.retryLoop(ctx, pctx, cl) }()

	runErr := f.readLoop(ctx, pctx, cl)
	cancel()
	if err := cl.Flush(pctx); err != nil && runErr == nil && !errors.Is(err, context.Canceled) {
		runErr = fmt.Errorf("kafka forwarder: flush: %w", err)
	}
	pcancel()
	close(ckDone)
	wg.Wait()
	if err := f.p.Save(); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// readLoop reads lines and produces them until ctx ends or the log fails.
func (f *Forwarder) readLoop(ctx, pctx context.Context, cl *kgo.Client) error {
	var slab []byte
	var fields [numLineFields]record.Value
	hostKey := []byte(f.cfg.Hostname)
	for {
		line, end, err := f.p.Reader.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kafka forwarder: %w", err)
		}
		val := line[:len(line)-1]
		// Records keep their value until acknowledged while the reader
		// reuses its buffer: copy into a slab (one allocation per MiB, freed
		// by the GC with its last record).
		if len(val) > cap(slab)-len(slab) {
			slab = make([]byte, 0, max(1<<20, len(val)))
		}
		off := len(slab)
		slab = append(slab, val...)
		val = slab[off:len(slab):len(slab)]

		p := &pending{rec: kgo.Record{Value: val}, Span: progress.Span{End: end, N: 1, ReadNS: time.Now().UnixNano()}}
		lineFields.Find(val, fields[:])
		p.RecvNS, _ = fields[fieldRecvNS].Int()
		st, stamped := seqstamp.Find(val)
		if stamped && st.SentNS > 0 {
			p.sentNS = st.SentNS
		}
		switch f.cfg.Key {
		case KeyHost:
			p.rec.Key = hostKey
		case KeyProducer:
			if stamped {
				p.rec.Key = []byte(st.Producer)
			}
		case KeySource:
			if v := fields[fieldSource]; v.Kind == record.KindString {
				p.rec.Key = v.Raw[1 : len(v.Raw)-1 : len(v.Raw)-1] // as written, escapes and all
			}
		}
		f.p.Add(&p.Span)
		f.produce(ctx, pctx, cl, p)
	}
}

// produce hands p to kgo under pctx. ctx is Run's: once it has ended, a
// failure is not retried.
func (f *Forwarder) produce(ctx, pctx context.Context, cl *kgo.Client, p *pending) {
	cl.Produce(pctx, &p.rec, func(r *kgo.Record, err error) {
		if err == nil {
			f.produced.Add(1)
			f.m.produced.Inc()
			f.m.producedBytes.Add(float64(len(r.Value)))
			if p.sentNS > 0 {
				f.p.AckLatency(time.Now().UnixNano(), p.sentNS)
			}
			f.p.Ack(&p.Span)
			return
		}
		if ctx.Err() != nil || errors.Is(err, kgo.ErrClientClosed) {
			return // shutting down: stays unacknowledged, re-sent next start
		}
		f.errs.Add(1)
		f.m.errors.Inc()
		if now := time.Now().UnixNano(); f.cfg.Log != nil && now-f.lastErrLog.Load() > int64(10*time.Second) {
			f.lastErrLog.Store(now)
			f.cfg.Log.Warn("kafka produce failed; retrying (the record stays on disk)", "err", err, "errors_total", f.errs.Load())
		}
		f.retry.push(p)
	})
}

// retryLoop produces failed records again, with a back-off that grows
// while failures keep coming and resets once the queue is empty.
func (f *Forwarder) retryLoop(ctx, pctx context.Context, cl *kgo.Client) {
	backoff := 100 * time.Millisecond
	for {
		p := f.retry.pop()
		if p == nil {
			backoff = 100 * time.Millisecond
			select {
			case <-ctx.Done():
				return
			case <-f.retry.ready:
			}
			continue
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
		f.retries.Add(1)
		f.m.retries.Inc()
		// A fresh Record: kgo is done with the failed one, but its
		// producer fields (partition, sequence) must not be reused.
		p.rec = kgo.Record{Key: p.rec.Key, Value: p.rec.Value}
		f.produce(ctx, pctx, cl, p)
	}
}

// pending is one line read from the log and not yet known to be
// acknowledged.
type pending struct {
	progress.Span
	rec    kgo.Record
	sentNS int64 // the producer's sent_ns, if stamped
}

// retryQueue is unbounded so that kgo's promise goroutine never blocks on
// it; its length is bounded anyway by MaxInFlight.
type retryQueue struct {
	mu    sync.Mutex
	q     []*pending
	ready chan struct{}
}

func (r *retryQueue) push(p *pending) {
	r.mu.Lock()
	r.q = append(r.q, p)
	r.mu.Unlock()
	select {
	case r.ready <- struct{}{}:
	default:
	}
}

func (r *retryQueue) pop() *pending {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) == 0 {
		return nil
	}
	p := r.q[0]
	r.q[0] = nil
	r.q = r.q[1:]
	return p
}

// The fields of an output line the forwarder reads, found in one scan.
const (
	fieldSource = iota
	fieldRecvNS
	numLineFields
)

var lineFields = record.CompilePaths("source", "agg.recv_ns")
