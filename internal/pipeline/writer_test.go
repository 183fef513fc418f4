package pipeline

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipclab/logagg/internal/budget"
	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/testenv"
)

// memOutput records every WriteBuffers call; it can be told to fail.
type memOutput struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	calls   int
	failFor int // fail this many calls first, writing nothing
	reopens int
	room    int // > 0: the disk holds this many bytes; then whole lines only, and an error
}

func (o *memOutput) WriteBuffers(bufs [][]byte) (int64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls++
	if o.failFor > 0 {
		o.failFor--
		return 0, errors.New("disk full")
	}
	var n int64
	for _, b := range bufs {
		if o.room > 0 && o.buf.Len()+len(b) > o.room {
			// Full: what fits, cut back to whole lines (Output's contract).
			fit := b[:o.room-o.buf.Len()]
			fit = fit[:bytes.LastIndexByte(fit, '\n')+1]
			o.buf.Write(fit)
			return n + int64(len(fit)), errors.New("no space left on device")
		}
		o.buf.Write(b)
		n += int64(len(b))
	}
	return n, nil
}
func (o *memOutput) Tick() error   { return nil }
func (o *memOutput) Reopen() error { o.mu.Lock(); o.reopens++; o.mu.Unlock(); return nil }
func (o *memOutput) snapshot() (string, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String(), o.calls
}

func submitLine(t *testing.T, q *Queue, origin *metrics.Listener, line string) {
	t.Helper()
	b := q.NewBatch()
	b.Buf = append(b.Buf, line...)
	b.Records = 1
	b.Origin = origin
	if err := q.Submit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

func TestWriterGathersQueuedBatchesIntoOneWrite(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueue(64, 1024, m.Writer)
	out := &memOutput{}
	origin := m.ForListener("test://a")
	var want bytes.Buffer
	for i := 0; i < 50; i++ { // queued before the writer starts
		line := fmt.Sprintf("{\"n\":%d}\n", i)
		want.WriteString(line)
		submitLine(t, q, origin, line)
	}
	w := NewWriter(q, out, m.Writer, nil, 0)
	w.Close()
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, calls := out.snapshot()
	if got != want.String() {
		t.Fatalf("output mismatch:\n%s", got)
	}
	if calls != 1 {
		t.Fatalf("%d writes for 50 queued batches, want 1", calls)
	}
	if v := testutil.ToFloat64(origin.RecordsOut); v != 50 {
		t.Fatalf("records_out = %v, want 50", v)
	}
}

func TestSubmitBlocksWhenFull(t *testing.T) {
	q := NewQueue(2, 64, nil)
	submitLine(t, q, nil, "a\n")
	submitLine(t, q, nil, "b\n")
	b := q.NewBatch()
	b.Buf = append(b.Buf, "c\n"...)
	b.Records = 1
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := q.Submit(ctx, b); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit on a full queue returned %v, want it to block until the deadline", err)
	}
}

func TestWriterRetriesFailedWritesWithoutLoss(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueue(8, 64, m.Writer)
	out := &memOutput{failFor: 2}
	origin := m.ForListener("test://b")
	submitLine(t, q, origin, "one\n")
	w := NewWriter(q, out, m.Writer, nil, 0)
	done := make(chan error)
	go func() { done <- w.Run(context.Background()) }()
	testenv.Poll(t, 10*time.Second, "the record written after transient failures", func() (string, bool) {
		got, _ := out.snapshot()
		return got, got == "one\n"
	})
	if err := w.Reopen(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.Close()
	<-done
	if _, calls := out.snapshot(); calls != 3 {
		t.Fatalf("%d write calls, want 3 (two failures, one success)", calls)
	}
	if v := testutil.ToFloat64(m.Dropped.WithLabelValues("test://b", metrics.CauseWriteError)); v != 0 {
		t.Fatalf("dropped %v records, want 0", v)
	}
	if out.reopens != 1 {
		t.Fatalf("reopens = %d", out.reopens)
	}
}

func TestWriterGivesUpAtHardStopAndCounts(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueue(8, 64, m.Writer)
	out := &memOutput{failFor: 1 << 30}
	origin := m.ForListener("test://c")
	submitLine(t, q, origin, "lost\n")
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWriter(q, out, m.Writer, nil, 0)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "a write attempt", func() bool { _, calls := out.snapshot(); return calls > 0 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("writer did not stop at the hard stop")
	}
	if v := testutil.ToFloat64(m.Dropped.WithLabelValues("test://c", metrics.CauseWriteError)); v != 1 {
		t.Fatalf("write_error drops = %v, want 1", v)
	}
}

// The disk fills midway through a batch of many records and the writer
// gives up at the hard stop: every record is either in the output and in
// records_out, or lost and counted (write_error, and Lost) exactly, bytes
// included; none is counted twice or not at all.
func TestWriterCountsExactlyWhatAFullDiskLost(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueue(8, 1024, m.Writer)
	out := &memOutput{room: 1000}
	origin := m.ForListener("test://full")
	const payload = 30 // bytes received per record; its line is 36
	var total int
	for range 3 {
		b := q.NewBatch()
		for range 20 {
			b.Buf = append(b.Buf, `{"msg":"0123456789012345678901234"}`+"\n"...) // 36 bytes
			b.Records++
			b.InBytes += payload
		}
		b.Origin = origin
		total += b.Records
		if err := q.Submit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWriter(q, out, m.Writer, nil, 0)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	// the first write failed, then the writer gives up
	testenv.Eventually(t, 10*time.Second, "a write attempt", func() bool { _, calls := out.snapshot(); return calls > 0 })
	cancel()
	<-done
	got, _ := out.snapshot()
	written := strings.Count(got, "\n")
	if written != 1000/36 {
		t.Fatalf("%d lines in the output, want %d (what fits in 1000 bytes)", written, 1000/36)
	}
	recOut := int(testutil.ToFloat64(origin.RecordsOut))
	dropped := int(testutil.ToFloat64(m.Dropped.WithLabelValues("test://full", metrics.CauseWriteError)))
	droppedBytes := int(testutil.ToFloat64(m.DroppedBytes.WithLabelValues("test://full", metrics.CauseWriteError)))
	lost := w.Lost()
	// Dropped bytes are the lost records' received bytes.
	if recOut != written || dropped != total-written || int(lost.Records) != dropped ||
		droppedBytes != dropped*payload || int(lost.Bytes) != droppedBytes {
		t.Fatalf("out %d (file %d), dropped %d (%d bytes), Lost %+v; want out+dropped = %d records, %d bytes each dropped",
			recOut, written, dropped, droppedBytes, lost, total, payload)
	}
}

// marks records the Written calls of a Completer.
type marks struct {
	mu  sync.Mutex
	got []uint64
}

func (m *marks) Written(mark uint64) { m.mu.Lock(); m.got = append(m.got, mark); m.mu.Unlock() }
func (m *marks) list() []uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint64(nil), m.got...)
}

// A batch's completions run once its records are all in the output, in
// submission order; a batch only partly written (full disk at the hard
// stop) runs none, and a recycled batch carries none into its next use.
func TestWriterCallsCompletionsOnlyForWrittenBatches(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueue(8, 1024, m.Writer)
	out := &memOutput{room: 100}
	var src marks
	line := `{"msg":"0123456789012345678901234"}` + "\n" // 36 bytes: two fit
	for i := range 3 {
		b := q.NewBatch()
		b.Buf = append(b.Buf, line...)
		b.Records = 1
		b.Done = append(b.Done, Completion{To: &src, Mark: uint64(10 * (i + 1))})
		if err := q.Submit(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := NewWriter(q, out, m.Writer, nil, 0)
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	testenv.Eventually(t, 10*time.Second, "a write attempt", func() bool { _, calls := out.snapshot(); return calls > 0 })
	cancel()
	<-done
	if got := src.list(); fmt.Sprint(got) != "[10 20]" {
		t.Fatalf("completions %v, want [10 20] (the third batch was not written)", got)
	}
	if b := q.NewBatch(); len(b.Done) != 0 {
		t.Fatalf("a recycled batch still holds %d completions", len(b.Done))
	}
}

// stagingOutput is a memOutput that stages like the segment log's O_DIRECT
// appender: its stage grows to the largest write and is kept until
// Unstage. It records the size of every write.
type stagingOutput struct {
	memOutput
	sizes    []int
	stage    int64
	unstaged int
}

func (o *stagingOutput) WriteBuffers(bufs [][]byte) (int64, error) {
	n, err := o.memOutput.WriteBuffers(bufs)
	o.mu.Lock()
	o.sizes = append(o.sizes, int(n))
	o.stage = max(o.stage, n)
	o.mu.Unlock()
	return n, err
}
func (o *stagingOutput) Staged() int64 { o.mu.Lock(); defer o.mu.Unlock(); return o.stage }
func (o *stagingOutput) Unstage()      { o.mu.Lock(); o.stage = 0; o.unstaged++; o.mu.Unlock() }
func (o *stagingOutput) writes() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.sizes...)
}

// TestWritersShareTheRoom: a writer gathers past its floor while the room
// shared by the outputs' writers has some left (an output busy while the
// others are idle writes as much at a time as a lone one), and only up to
// its floor once the others hold the room; its stage is held in the room
// while it writes and given back when it idles; nothing stays held after.
func TestWritersShareTheRoom(t *testing.T) {
	line := strings.Repeat("x", 99) + "\n" // 100 B
	run := func(t *testing.T, others int64) []int {
		room := budget.NewGate(16 << 10)
		room.Charge(others) // what the other outputs' writers hold
		q := NewQueue(64, 1024, nil)
		for range 40 { // 4,000 B queued before the writer starts
			submitLine(t, q, nil, line)
		}
		out := &stagingOutput{}
		w := NewWriter(q, out, nil, nil, 8<<10)
		w.ShareRoom(room, 1000)
		w.Close()
		if err := w.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if room.Held() != others {
			t.Errorf("room holds %d bytes after the writer stopped, want the others' %d", room.Held(), others)
		}
		return out.writes()
	}
	if got := run(t, 0); len(got) != 1 || got[0] != 4000 {
		t.Errorf("alone: writes of %v bytes, want one of 4000", got)
	}
	if got := run(t, 16<<10); len(got) != 4 || slicesMax(got) != 1000 {
		t.Errorf("the room full: writes of %v bytes, want four of the floor, 1000", got)
	}

	// The stage: held in the room while the output writes, given back at
	// the first tick with nothing written.
	room := budget.NewGate(16 << 10)
	q := NewQueue(64, 1024, nil)
	out := &stagingOutput{}
	w := NewWriter(q, out, nil, nil, 8<<10)
	w.ShareRoom(room, 1000)
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	for range 40 {
		submitLine(t, q, nil, line)
	}
	testenv.Eventually(t, 5*time.Second, "the stage held in the room", func() bool {
		return out.Staged() > 1000 && room.Held() >= out.Staged()
	})
	testenv.Eventually(t, 5*time.Second, "the stage given back once idle", func() bool { return room.Held() == 0 })
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out.unstaged == 0 || room.Held() != 0 {
		t.Fatalf("unstaged %d times, room holds %d bytes", out.unstaged, room.Held())
	}
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}
