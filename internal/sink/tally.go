package sink

import (
	"math/bits"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
)

// Tally accumulates the counters of one Emitter between two hand-overs:
// the hot path adds to plain ints, and the Prometheus collectors are
// touched once per batch (Flush). A Tally belongs to one goroutine.
type Tally struct {
	Records int // records received (encoded or dropped)
	Bytes   int // bytes received (payload and framing)
	formats [record.NumFormats]int
	flags   [record.NumFlags]int
	// dropped and droppedBytes are records, and payload bytes, given up
	// at the hard stop (cause drain_timeout).
	dropped, droppedBytes int
}

// Add counts one encoded record.
func (t *Tally) Add(res record.Result) {
	t.Records++
	if int(res.Format) < len(t.formats) {
		t.formats[res.Format]++
	}
	for f := uint16(res.Flags); f != 0; f &= f - 1 {
		if i := bits.TrailingZeros16(f); i < len(t.flags) {
			t.flags[i]++
		}
	}
}

func (t *Tally) drop(records, bytes int) {
	t.dropped += records
	t.droppedBytes += bytes
}

// Flush adds the counts to m (which may be nil) and zeroes them.
func (t *Tally) Flush(m *metrics.Listener) {
	if m != nil {
		if t.Records > 0 {
			m.RecordsIn.Add(float64(t.Records))
		}
		if t.Bytes > 0 {
			m.BytesIn.Add(float64(t.Bytes))
		}
		for i, n := range t.formats {
			m.Format(record.Format(i).String(), n)
		}
		for i, n := range t.flags {
			m.DecodeError(record.FlagName(i), n)
		}
		m.Drop(metrics.CauseDrainTimeout, t.dropped)
		m.DropBytes(metrics.CauseDrainTimeout, t.droppedBytes)
	}
	*t = Tally{}
}
