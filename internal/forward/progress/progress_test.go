package progress

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipclab/logagg/internal/segment"
)

// A log of two segments: "a\n" "b\n" in segment 1 (rotated), "c\n" in
// the active segment 2.
func twoSegments(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "log.jsonl")
	if err := os.WriteFile(segment.RotatedName(out, 1), []byte("a\nb\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte("c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func open(t *testing.T, out string, reg prometheus.Registerer) *Progress {
	t.Helper()
	p, err := Open(Config{Name: "test", Peer: "the test", From: out,
		CheckpointPath: segment.CheckpointPath(out, "test"), CheckpointInterval: time.Hour, Poll: time.Millisecond}, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Reader.Close() })
	return p
}

// Acknowledgements out of order move the checkpoint only over the
// acknowledged prefix, across the segment marker; a restart resumes there.
func TestCheckpointFollowsTheAcknowledgedPrefix(t *testing.T) {
	out := twoSegments(t)
	reg := prometheus.NewPedanticRegistry()
	p := open(t, out, reg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var spans []*Span
	for range 3 {
		_, end, err := p.Reader.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := &Span{End: end, N: 1, ReadNS: time.Now().UnixNano()}
		p.Add(s)
		spans = append(spans, s)
	}
	if _, n, oldest := p.Snapshot(); n != 3 || oldest.IsZero() {
		t.Fatalf("in flight %d (oldest %v), want 3", n, oldest)
	}
	p.Ack(spans[1])
	p.Ack(spans[2])
	if err := p.Save(); err != nil {
		t.Fatal(err)
	}
	if got := p.Checkpoint(); got.Seq != 0 && got != (segment.Position{Seq: 1}) {
		t.Fatalf("checkpoint %+v with the first line unacknowledged, want none", got)
	}
	if p.MayDelete(1) {
		t.Fatal("segment 1 deletable with its first line unacknowledged")
	}
	// Records count as in flight until the prefix before them is
	// acknowledged too: the lag is what a restart would send again.
	if v := testutil.ToFloat64(p.m.lagRecords); v != 3 {
		t.Errorf("lag_records %v, want 3", v)
	}
	if up, err := p.CaughtUp(); up || err != nil {
		t.Fatalf("caught up %v (%v) with a line unacknowledged", up, err)
	}
	p.Ack(spans[0])
	if err := p.Save(); err != nil {
		t.Fatal(err)
	}
	want := segment.Position{Seq: 2, Offset: 2}
	if got := p.Checkpoint(); got != want {
		t.Fatalf("checkpoint %+v, want %+v", got, want)
	}
	if !p.MayDelete(1) || p.MayDelete(2) {
		t.Fatal("want segment 1 deletable and 2 not")
	}
	if up, err := p.CaughtUp(); !up || err != nil {
		t.Fatalf("not caught up (%v) with every line acknowledged", err)
	}
	if v := testutil.ToFloat64(p.m.lagRecords); v != 0 {
		t.Errorf("lag_records %v, want 0", v)
	}
	if again := open(t, out, nil); again.Checkpoint() != want {
		t.Fatalf("reopened at %+v, want %+v", again.Checkpoint(), want)
	}
}

// With nothing in flight, entering a segment moves the watermark at once;
// with something in flight, only after it is acknowledged.
func TestEnterSegmentWaitsForWhatIsInFlight(t *testing.T) {
	p := open(t, twoSegments(t), nil)
	p.EnterSegment(segment.Position{Seq: 2})
	if acked, _, _ := p.Snapshot(); acked != (segment.Position{Seq: 2}) {
		t.Fatalf("acked %+v, want the start of segment 2", acked)
	}
	s := &Span{End: segment.Position{Seq: 2, Offset: 2}, N: 1}
	p.Add(s)
	p.EnterSegment(segment.Position{Seq: 3})
	if acked, n, _ := p.Snapshot(); acked != (segment.Position{Seq: 2}) || n != 1 {
		t.Fatalf("acked %+v with %d in flight, want segment 2's start and 1", acked, n)
	}
	p.Ack(s)
	if acked, n, _ := p.Snapshot(); acked != (segment.Position{Seq: 3}) || n != 0 {
		t.Fatalf("acked %+v with %d in flight, want segment 3's start and 0", acked, n)
	}
}

// The drain context outlives its parent by the drain time, no more.
func TestDrainContextOutlivesItsParent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pctx, stop := DrainContext(ctx, 50*time.Millisecond)
	defer stop()
	cancel()
	if pctx.Err() != nil {
		t.Fatal("drain context ended with its parent")
	}
	select {
	case <-pctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("drain context outlived its drain time")
	}
}
