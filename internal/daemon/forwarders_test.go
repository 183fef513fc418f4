package daemon

import "testing"

type retainUpTo uint64

func (r retainUpTo) MayDelete(seq uint64) bool { return seq < uint64(r) }

// TestTwoForwardersOfOneOutput: a segment may go only once both forwarders
// of its output shipped it, and a write wakes both.
func TestTwoForwardersOfOneOutput(t *testing.T) {
	var woke []string
	r, w := withForwarder(nil, nil, retainUpTo(5), func() { woke = append(woke, "otlp") })
	if !r.MayDelete(4) || r.MayDelete(5) {
		t.Errorf("one forwarder: its own rule")
	}
	r, w = withForwarder(retainUpTo(3), func() { woke = append(woke, "kafka") }, retainUpTo(5), w)
	if !r.MayDelete(2) || r.MayDelete(3) || r.MayDelete(4) {
		t.Errorf("segments 3 and 4 shipped by one forwarder only were deletable")
	}
	w()
	if len(woke) != 2 {
		t.Errorf("woke %v, want both", woke)
	}
}
