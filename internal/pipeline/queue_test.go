package pipeline

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
)

// TestQueueIsBoundedInBytes: a queue of 256 KiB takes many small batches
// but only a few big ones, and its memory counts say what it holds.
func TestQueueIsBoundedInBytes(t *testing.T) {
	m := metrics.New(nil)
	q := NewQueueBytes(256<<10, 64<<10, m.Writer)
	submit := func(n int) error {
		b := q.NewBatch()
		b.Buf = append(b.Buf, bytes.Repeat([]byte("x"), n-1)...)
		b.Buf = append(b.Buf, '\n')
		b.Records = 1
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		err := q.Submit(ctx, b)
		if err != nil {
			q.Recycle(b) // still ours
		}
		return err
	}
	// A round of a few records is copied into a 1 KiB buffer: a hundred
	// of them fit where four full batches would.
	for i := range 100 {
		if err := submit(700); err != nil {
			t.Fatalf("small batch %d: %v", i, err)
		}
	}
	if got := q.Bytes(); got != 100<<10 {
		t.Fatalf("100 small batches hold %d bytes of buffers, want %d", got, 100<<10)
	}
	if got := m.Memory.Held(metrics.MemQueuedBatches); got != 100<<10 {
		t.Fatalf("memory counts %d queued bytes, want %d", got, 100<<10)
	}
	// Full batches: two more fit (256 KiB), the third waits.
	for i := range 2 {
		if err := submit(60 << 10); err != nil {
			t.Fatalf("full batch %d: %v", i, err)
		}
	}
	if err := submit(60 << 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a batch past the byte limit: %v, want it to wait until the deadline", err)
	}
	if open := m.Memory.Held(metrics.MemOpenBatches); open != 0 {
		t.Fatalf("%d bytes counted open after the refused batch was dropped, want 0", open)
	}
	// The writer taking the small ones makes room for one more.
	for range 100 {
		b := <-q.ch
		q.took(b)
		q.Recycle(b)
	}
	if err := submit(60 << 10); err != nil {
		t.Fatalf("after the writer took a batch: %v", err)
	}
}

// TestQueueLetsAnOversizedBatchThroughAlone: one record bigger than the
// whole limit is not stuck, but it waits for the queue to empty.
func TestQueueLetsAnOversizedBatchThroughAlone(t *testing.T) {
	q := NewQueueBytes(64<<10, 16<<10, nil)
	big := q.NewBatch()
	big.Buf = append(big.Buf, bytes.Repeat([]byte("y"), 200<<10)...)
	big.Records = 1
	if err := q.Submit(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	small := q.NewBatch()
	small.Buf = append(small.Buf, "z\n"...)
	small.Records = 1
	if q.TrySubmit(small) {
		t.Fatal("a batch joined a queue already past its limit")
	}
}
