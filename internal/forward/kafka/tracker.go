package kafka

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ipclab/logagg/internal/segment"
)

// pending is one line read from the log and not yet known to be
// acknowledged, or a segment marker (rec.Value nil) that is born
// acknowledged and moves the checkpoint to the start of the next segment.
type pending struct {
	rec    kgo.Record
	end    segment.Position // just after the line
	size   int              // bytes of the line, '\n' included
	readNS int64            // when the forwarder read it
	recvNS int64            // agg.recv_ns, when the aggregator received it
	sentNS int64            // the producer's sent_ns, if stamped
	acked  bool
	marker bool
}

// tracker turns out-of-order acknowledgements (records of different
// partitions are acknowledged independently) into an in-order watermark:
// acked is the end of the longest acknowledged prefix of the log.
//
// add and enterSegment are called by the read loop, ack by kgo's promise
// goroutine, snapshot by anyone.
type tracker struct {
	mu       sync.Mutex
	q        []*pending // in log order
	acked    segment.Position
	inFlight int   // records (not markers) in q
	bytes    int64 // bytes of those records
}

func (t *tracker) add(p *pending) {
	t.mu.Lock()
	t.q = append(t.q, p)
	t.inFlight++
	t.bytes += int64(p.size)
	t.mu.Unlock()
}

// enterSegment is the reader's OnSegment hook: once everything before it is
// acknowledged, the checkpoint may move to the start of the new segment, so
// the finished one becomes deletable before the new one has any line.
func (t *tracker) enterSegment(pos segment.Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.q) == 0 {
		if t.acked.Less(pos) {
			t.acked = pos
		}
		return
	}
	t.q = append(t.q, &pending{end: pos, acked: true, marker: true})
}

func (t *tracker) ack(p *pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.acked = true
	n := 0
	for n < len(t.q) && t.q[n].acked {
		q := t.q[n]
		if !q.marker {
			t.inFlight--
			t.bytes -= int64(q.size)
		}
		if t.acked.Less(q.end) {
			t.acked = q.end
		}
		t.q[n] = nil
		n++
	}
	t.q = t.q[n:]
}

// snapshot returns the acknowledged position, the records in flight and
// the time the oldest of them was received (or read, if it carries no
// agg.recv_ns); zero when none is in flight.
func (t *tracker) snapshot() (acked segment.Position, inFlight int, oldest time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.q {
		if p.marker {
			continue
		}
		ns := p.recvNS
		if ns == 0 {
			ns = p.readNS
		}
		oldest = time.Unix(0, ns)
		break
	}
	return t.acked, t.inFlight, oldest
}
