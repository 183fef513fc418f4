package sink

import (
	"math/bits"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/record"
)

// Why a record handed to the sink did not reach an output.
const (
	dropDrainTimeout = iota // the hard stop came first
	dropRule                // a rule dropped it
	dropRateLimit           // a rule's rate limit suppressed it
	dropUnrouted            // no rule routed it, and unrouted is discard
	dropDiscarded           // every output it was routed to is a discard output
	dropOutputFull          // its first output's queue was full, and that output drops when full
	numDrops
)

var dropCauses = [numDrops]string{metrics.CauseDrainTimeout, metrics.CauseRule, metrics.CauseRateLimit,
	metrics.CauseUnrouted, metrics.CauseDiscarded, metrics.CauseOutputFull}

// Tally accumulates the counters of one Emitter between two hand-overs:
// the hot path adds to plain ints, and the Prometheus collectors are
// touched once per batch (Flush). A Tally belongs to one goroutine.
type Tally struct {
	Records int // records received (whatever became of them)
	Bytes   int // bytes received (payload and framing)
	formats [record.NumFormats]int
	flags   [record.NumFlags]int
	// drops are records, and the payload bytes received for them, that
	// reached no output, by cause.
	drops [numDrops]struct{ n, bytes int }
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

func (t *Tally) drop(cause, records, bytes int) {
	t.drops[cause].n += records
	t.drops[cause].bytes += bytes
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
		for i, d := range t.drops {
			m.Drop(dropCauses[i], d.n)
			m.DropBytes(dropCauses[i], d.bytes)
		}
	}
	*t = Tally{}
}
