package sink_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

func counter(t *testing.T, cv *prometheus.CounterVec, lv ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := cv.WithLabelValues(lv...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

type marks struct{ got []uint64 }

func (m *marks) Written(mark uint64) { m.got = append(m.got, mark) }

func meta() *record.Meta {
	m := &record.Meta{Transport: "test", Listener: "test://"}
	m.Prepare()
	return m
}

func TestEmitBatchesAndCounts(t *testing.T) {
	capture := transporttest.NewCapture()
	m := metrics.New(nil)
	s := sink.New(capture, sink.Options{BatchBytes: 200})
	e := s.Emitter(m.ForListener("l"))
	done := &marks{}
	for i := range 10 {
		e.Received(11)
		if !e.Emit([]byte(`{"n":`+strings.Repeat("1", 4)+`}`), meta(), 0) {
			t.Fatalf("record %d refused", i)
		}
		e.Done(pipeline.Completion{To: done, Mark: uint64(i + 1)})
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	e.Release()
	if capture.Len() != 10 {
		t.Fatalf("captured %d records, want 10", capture.Len())
	}
	if capture.Batches() < 2 {
		t.Errorf("%d batches: a 200-byte batch size should have split ten records", capture.Batches())
	}
	// One completion per batch, the last mark of each, in order, the last
	// one covering everything.
	if n := len(done.got); n != int(capture.Batches()) || done.got[n-1] != 10 {
		t.Errorf("completions %v for %d batches", done.got, capture.Batches())
	}
	if got := counter(t, m.RecordsIn, "l"); got != 10 {
		t.Errorf("records_in = %v", got)
	}
	if got := counter(t, m.BytesIn, "l"); got != 110 {
		t.Errorf("bytes_in = %v", got)
	}
	if got := counter(t, m.Formats, "l", "json"); got != 10 {
		t.Errorf("records_by_format{json} = %v", got)
	}
}

// TestHardStopCountsRecordsAndBytes: the batch a hard stop refuses and
// every record after it are counted dropped, with their payload bytes, and
// records in = captured + dropped.
func TestHardStopCountsRecordsAndBytes(t *testing.T) {
	capture := transporttest.NewCapture()
	capture.Block()
	hard, stop := context.WithCancel(context.Background())
	stop()
	m := metrics.New(nil)
	e := sink.New(capture, sink.Options{HardStop: hard, BatchBytes: 1}).Emitter(m.ForListener("l"))
	payload := []byte("twelve bytes")
	accepted := 0
	for range 5 {
		if e.Emit(payload, meta(), 0) {
			accepted++
		}
	}
	if accepted != 1 {
		t.Errorf("%d records accepted; want only the first, before its batch met the hard stop", accepted)
	}
	if err := e.Flush(); err == nil {
		t.Fatal("Flush after the hard stop returned nil")
	}
	if e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done attached a completion after the hard stop")
	}
	e.Release()
	if got := counter(t, m.RecordsIn, "l"); got != 5 {
		t.Errorf("records_in = %v, want 5", got)
	}
	if got := counter(t, m.Dropped, "l", metrics.CauseDrainTimeout); got != 5 {
		t.Errorf("dropped = %v, want 5", got)
	}
	if got := counter(t, m.DroppedBytes, "l", metrics.CauseDrainTimeout); got != 5*float64(len(payload)) {
		t.Errorf("dropped_bytes = %v, want %d", got, 5*len(payload))
	}
	if capture.Len() != 0 {
		t.Errorf("captured %d", capture.Len())
	}
}

func TestDoneNeedsARecord(t *testing.T) {
	e := sink.New(transporttest.NewCapture(), sink.Options{}).Emitter(nil)
	if e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done attached to a batch without records")
	}
	e.Emit([]byte("x"), meta(), 0)
	if !e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done refused after a record")
	}
}

func TestMessageFramesSequences(t *testing.T) {
	capture := transporttest.NewCapture()
	e := sink.New(capture, sink.Options{}).Emitter(nil)
	e.Message([]byte("\x1e{\"a\":1}\n\x1e{\"a\":2}\n"), 1<<10, false, meta())
	e.Message([]byte("one datagram\nwith two lines\n"), 1<<10, false, meta())
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := capture.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Message != "one datagram\nwith two lines" {
		t.Errorf("records %+v", recs)
	}
}

// TestReleaseCountsWhatWasNotHandedOver: a source that ends without a
// final Flush loses nothing silently.
func TestReleaseCountsWhatWasNotHandedOver(t *testing.T) {
	m := metrics.New(nil)
	e := sink.New(transporttest.NewCapture(), sink.Options{}).Emitter(m.ForListener("l"))
	e.Emit([]byte("abc"), meta(), 0)
	e.Release()
	if got := counter(t, m.Dropped, "l", metrics.CauseDrainTimeout); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
}
