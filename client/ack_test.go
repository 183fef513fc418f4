package client

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
	_ "github.com/ipclab/logagg/internal/transport/unixstream"
)

// startUnix runs the real unix stream listener into c (whose Submit counts
// as written: it runs the batches' completions).
func startUnix(t *testing.T, c *transporttest.Capture) string {
	t.Helper()
	raw := "unix://" + filepath.Join(tempDir(t), "a.sock")
	l, err := transport.Open(raw, metrics.New(nil), transport.Deps{Out: c, Opts: transport.DefaultOptions(),
		HardStop: context.Background(), BatchBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		c.Unblock()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return raw
}

// Every record is acknowledged once written, through a window much
// smaller than what is sent (the sender waits for acknowledgements), and
// the hello line is not a record.
func TestAckEveryRecordAcknowledged(t *testing.T) {
	c := transporttest.NewCapture()
	w, err := Dial(startUnix(t, c), WithAck(2048), WithSeq("a"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	for i := 0; i < n; i++ {
		if err := w.Log("INFO", "acknowledged"); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w.Sent() != n || w.Delivered() != n || w.Failed() != 0 {
		t.Fatalf("sent %d, delivered %d, failed %d; want %d, %d, 0", w.Sent(), w.Delivered(), w.Failed(), n, n)
	}
	if c.Len() != n {
		t.Fatalf("%d records captured, want %d (the hello is no record)", c.Len(), n)
	}
	if errs := c.Errors(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// Records the aggregator holds but has not written are not delivered:
// Close waits for them until the give-up time and counts them failed.
func TestAckNothingDeliveredUntilWritten(t *testing.T) {
	c := transporttest.NewCapture()
	c.Block()
	w, err := Dial(startUnix(t, c), WithAck(0), WithReconnect(time.Millisecond, 10*time.Millisecond),
		WithReconnectGiveUp(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		if err := w.Log("INFO", "held"); err != nil {
			t.Fatal(err)
		}
	}
	for c.Waiting() == 0 { // the listener holds them, stuck in Submit
		time.Sleep(time.Millisecond)
	}
	if err := w.Close(); err == nil {
		t.Fatal("Close returned nil with nothing acknowledged")
	}
	if w.Sent() != 100 || w.Delivered() != 0 || w.Failed() != 100 {
		t.Fatalf("sent %d, delivered %d, failed %d; want 100, 0, 100", w.Sent(), w.Delivered(), w.Failed())
	}
}

// A listener that does not speak the mode (here: one that reads and
// discards) never confirms it: Dial says so.
func TestAckRefusedWithoutConfirmation(t *testing.T) {
	defer func(d time.Duration) { ackHandshakeTimeout = d }(ackHandshakeTimeout)
	ackHandshakeTimeout = 100 * time.Millisecond
	u, _ := listen(t, "unix")
	if _, err := Dial(u, WithAck(0)); !errors.Is(err, ErrNoAck) {
		t.Fatalf("Dial: %v, want ErrNoAck", err)
	}
	if _, err := Dial("udp://127.0.0.1:9", WithAck(0)); !errors.Is(err, ErrBadURL) {
		t.Fatalf("Dial udp with ack: %v, want ErrBadURL", err)
	}
}
