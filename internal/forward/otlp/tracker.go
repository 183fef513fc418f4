package otlp

import (
	"sync"
	"time"

	"github.com/ipclab/logagg/internal/segment"
)

// tracker turns out-of-order acknowledgements (requests in flight
// concurrently finish in any order) into an in-order watermark: acked is
// the end of the longest acknowledged prefix of the log.
//
// add and enterSegment are called by the read loop, ack by the senders,
// snapshot by anyone.
type tracker struct {
	mu       sync.Mutex
	q        []*batch // in log order
	acked    segment.Position
	inFlight int // records (not markers) in q
}

func (t *tracker) add(b *batch) {
	t.mu.Lock()
	t.q = append(t.q, b)
	t.inFlight += b.n
	t.mu.Unlock()
}

// enterSegment moves the checkpoint to the start of a new segment once
// everything before it is acknowledged, so the finished one becomes
// deletable before the new one has any line.
func (t *tracker) enterSegment(pos segment.Position) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.q) == 0 {
		if t.acked.Less(pos) {
			t.acked = pos
		}
		return
	}
	t.q = append(t.q, &batch{end: pos, acked: true, marker: true})
}

func (t *tracker) ack(b *batch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b.acked = true
	n := 0
	for n < len(t.q) && t.q[n].acked {
		q := t.q[n]
		t.inFlight -= q.n
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
	for _, b := range t.q {
		if b.marker {
			continue
		}
		ns := b.recvNS
		if ns == 0 {
			ns = b.readNS
		}
		oldest = time.Unix(0, ns)
		break
	}
	return t.acked, t.inFlight, oldest
}
