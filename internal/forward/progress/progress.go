// Package progress is what every forwarder of the segment log shares: the
// reader of the log, the in-order watermark over acknowledgements that
// arrive out of order, the durable checkpoint, and the lag and checkpoint
// metrics.
//
// A forwarder (forward/kafka, forward/otlp) reads complete lines from
// Progress.Reader, groups them into Spans (a Kafka record, an OTLP
// request), Adds each span before sending it and Acks it once its peer
// acknowledged it. The checkpoint (segment.SaveCheckpoint: temp file,
// fsync, rename, fsync dir) only ever moves to the end of the longest
// acknowledged prefix of the log, so a restart resumes without losing
// anything and re-sends at most what was read after the last checkpoint.
//
// Add, EnterSegment and the reader are the read loop's; Ack is safe from
// any goroutine, as are Checkpoint, MayDelete, Snapshot, Lag and CaughtUp,
// before, during and after the forwarder's run.
package progress

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ipclab/logagg/internal/segment"
)

// Span is a run of consecutive lines of the log that its peer acknowledges
// as a whole, or a segment marker (N 0), which is born acknowledged and
// moves the checkpoint to the start of the next segment.
type Span struct {
	End    segment.Position // just after its last line
	N      int              // records in it; 0 for a marker
	ReadNS int64            // when its first line was read
	RecvNS int64            // agg.recv_ns of its first line (0: unknown)
	acked  bool
}

// Config says which log, which checkpoint and which metrics.
type Config struct {
	// Name is the forwarder's ("kafka", "otlp"): its metrics are
	// logagg_forward_NAME_*, and its errors say "NAME forwarder".
	Name string
	// Peer names what acknowledges, in the metrics' help: "Kafka".
	Peer               string
	From               string // the segment log
	CheckpointPath     string
	CheckpointInterval time.Duration
	Poll               time.Duration
	// OnSegment, when set, is the reader's hook in place of EnterSegment:
	// a forwarder that batches lines must end its batch before the
	// segment marker goes in (and then call EnterSegment itself).
	OnSegment func(segment.Position)
}

// Progress is one forwarder's position in its log. It implements
// segment.Retainer.
type Progress struct {
	cfg    Config
	Reader *segment.Reader
	m      metrics

	mu       sync.Mutex
	q        []*Span // in log order
	acked    segment.Position
	inFlight int // records (not markers) in q

	// durable is the last checkpoint on disk; MayDelete reads it.
	durableMu sync.Mutex
	durable   segment.Position
}

var _ segment.Retainer = (*Progress)(nil)

// Open loads the checkpoint, opens the log after it and registers the
// metrics on reg (nil: not registered). It does no network I/O.
func Open(cfg Config, reg prometheus.Registerer) (*Progress, error) {
	p := &Progress{cfg: cfg}
	start, _, err := segment.LoadCheckpoint(cfg.CheckpointPath)
	if err != nil {
		return nil, p.errorf("%w", err)
	}
	p.acked, p.durable = start, start
	hook := cfg.OnSegment
	if hook == nil {
		hook = p.EnterSegment
	}
	p.Reader, err = segment.NewReader(segment.ReaderConfig{Output: cfg.From, Start: start, Poll: cfg.Poll, OnSegment: hook})
	if err != nil {
		return nil, p.errorf("%w", err)
	}
	if err := p.m.init(cfg, p.Reader, reg); err != nil {
		p.Reader.Close()
		return nil, p.errorf("register metrics: %w", err)
	}
	return p, nil
}

func (p *Progress) errorf(format string, args ...any) error {
	return fmt.Errorf(p.cfg.Name+" forwarder: "+format, args...)
}

// Add puts s, about to be sent, at the end of what awaits acknowledgement.
func (p *Progress) Add(s *Span) {
	p.mu.Lock()
	p.q = append(p.q, s)
	p.inFlight += s.N
	p.mu.Unlock()
}

// EnterSegment is the reader's OnSegment hook: once everything before pos
// is acknowledged, the checkpoint may move to the start of the new
// segment, so the finished one becomes deletable before the new one has
// any line.
func (p *Progress) EnterSegment(pos segment.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.q) == 0 {
		if p.acked.Less(pos) {
			p.acked = pos
		}
		return
	}
	p.q = append(p.q, &Span{End: pos, acked: true})
}

// Ack says s was acknowledged; the watermark moves over the acknowledged
// prefix.
func (p *Progress) Ack(s *Span) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s.acked = true
	n := 0
	for n < len(p.q) && p.q[n].acked {
		q := p.q[n]
		p.inFlight -= q.N
		if p.acked.Less(q.End) {
			p.acked = q.End
		}
		p.q[n] = nil
		n++
	}
	p.q = p.q[n:]
}

// AckLatency observes, at now, the acknowledgement of a record its
// producer stamped as sent at sentNS.
func (p *Progress) AckLatency(now, sentNS int64) {
	p.m.ackLatency.Observe(float64(now-sentNS) / 1e9)
}

// Snapshot returns the acknowledged position, the records in flight and
// the time the oldest of them was received (or read, if it carries no
// agg.recv_ns); zero when none is in flight.
func (p *Progress) Snapshot() (acked segment.Position, inFlight int, oldest time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.q {
		if s.N == 0 {
			continue
		}
		ns := s.RecvNS
		if ns == 0 {
			ns = s.ReadNS
		}
		oldest = time.Unix(0, ns)
		break
	}
	return p.acked, p.inFlight, oldest
}

// CheckpointPath is the file the checkpoint is saved in.
func (p *Progress) CheckpointPath() string { return p.cfg.CheckpointPath }

// Checkpoint returns the durable checkpoint.
func (p *Progress) Checkpoint() segment.Position {
	p.durableMu.Lock()
	defer p.durableMu.Unlock()
	return p.durable
}

// MayDelete reports whether segment seq lies entirely before the durable
// checkpoint (segment.Retainer).
func (p *Progress) MayDelete(seq uint64) bool { return seq < p.Checkpoint().Seq }

// Save makes the acknowledged position durable (if it moved) and updates
// the gauges. A failure is counted; the previous checkpoint stays valid.
func (p *Progress) Save() error {
	acked, inFlight, oldest := p.Snapshot()
	p.m.lagRecords.Set(float64(inFlight))
	if oldest.IsZero() {
		p.m.oldestAge.Set(0)
	} else {
		p.m.oldestAge.Set(max(0, time.Since(oldest).Seconds()))
	}
	if lb, _, err := segment.Backlog(p.cfg.From, acked); err == nil {
		p.m.lagBytes.Set(float64(lb))
	}
	if acked.Seq == 0 || acked == p.Checkpoint() {
		return nil
	}
	if err := segment.SaveCheckpoint(p.cfg.CheckpointPath, acked); err != nil {
		p.m.checkpointErrors.Inc()
		return p.errorf("%w", err)
	}
	p.durableMu.Lock()
	p.durable = acked
	p.durableMu.Unlock()
	p.m.checkpointSeq.Set(float64(acked.Seq))
	p.m.checkpointOffset.Set(float64(acked.Offset))
	return nil
}

// SaveEvery saves every CheckpointInterval until done is closed.
func (p *Progress) SaveEvery(done <-chan struct{}) {
	t := time.NewTicker(p.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			_ = p.Save() // counted; the next tick tries again
		}
	}
}

// Lag is how far a forwarder is behind its log.
type Lag struct {
	Records int   // read and not yet acknowledged
	Bytes   int64 // of the log after the acknowledged position, read or not
	// Lines says a complete line follows the acknowledged position: there
	// is something to ship. A partial last line (still being written, or
	// torn by a crash) is not one.
	Lines bool
}

// Lag measures how far the forwarder is behind its log.
func (p *Progress) Lag() (Lag, error) {
	acked, inFlight, _ := p.Snapshot()
	l := Lag{Records: inFlight}
	var err error
	l.Bytes, l.Lines, err = segment.Backlog(p.cfg.From, acked)
	return l, err
}

// CaughtUp reports whether every complete line present in the log has been
// acknowledged (aggregator forward --once stops there).
func (p *Progress) CaughtUp() (bool, error) {
	l, err := p.Lag()
	return err == nil && l.Records == 0 && !l.Lines, err
}

// DrainContext returns the context a forwarder sends under: it outlives
// ctx by drain, so that on shutdown what is in flight gets that long to
// be acknowledged (what is not is sent again on the next start). Call
// stop when done.
func DrainContext(ctx context.Context, drain time.Duration) (pctx context.Context, stop func()) {
	pctx, pcancel := context.WithCancel(context.WithoutCancel(ctx))
	stopDrain := context.AfterFunc(ctx, func() {
		t := time.NewTimer(drain)
		defer t.Stop()
		select {
		case <-t.C:
			pcancel()
		case <-pctx.Done():
		}
	})
	return pctx, func() { stopDrain(); pcancel() }
}
