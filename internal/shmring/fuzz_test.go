package shmring

import (
	"errors"
	"sync/atomic"
	"testing"
)

// FuzzPoll: a hostile producer controls the ring's data and its tail; the
// reader reports ErrCorrupt or frames that lie inside the ring, never
// panics and never reads out of bounds (the mapping would fault).
func FuzzPoll(f *testing.F) {
	f.Add([]byte{5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o'}, uint64(16), uint64(0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, uint64(MinSize), uint64(0))
	f.Add([]byte{0, 16, 0, 0}, uint64(64), uint64(8))
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64) {
		r, w := pair(t, Config{Size: MinSize})
		defer w.Close()
		defer r.Close()
		copy(w.data, data)
		// The reader's head is its own (only the tail is shared and
		// hostile), and it only ever moves by whole 8-byte units.
		r.head = head % (2 * MinSize) &^ (frameAlign - 1)
		atomic.StoreUint64(w.tailp, tail)
		n := 0
		_, err := r.Poll(func(frame []byte) {
			n++
			if len(frame) > r.cfg.MaxFrame {
				t.Fatalf("frame of %d bytes over the max frame %d", len(frame), r.cfg.MaxFrame)
			}
		})
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("unexpected error %v", err)
		}
		if err == nil && r.head != tail {
			t.Fatalf("Poll stopped at %d before the tail %d without an error", r.head, tail)
		}
	})
}
