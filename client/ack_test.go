package client

import (
	"context"
	"errors"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/transporttest"
	_ "github.com/ipclab/logagg/internal/transport/unixstream"
)

// startUnix runs the real unix stream listener into c (whose Submit counts
// as written: it runs the batches' completions).
func startUnix(t *testing.T, c *transporttest.Capture) string {
	t.Helper()
	raw := "unix://" + filepath.Join(tempDir(t), "a.sock")
	l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(c, sink.Options{HardStop: context.Background(), BatchBytes: 1024}), Opts: transport.DefaultOptions()})
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
	// the listener holds them, stuck in Submit
	testenv.Eventually(t, 10*time.Second, "a blocked Submit", func() bool { return c.Waiting() > 0 })
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

// fileOut is a pipeline.Output that appends to a file with writev.
type fileOut struct{ f *os.File }

func (o fileOut) WriteBuffers(bufs [][]byte) (int64, error) {
	nb := net.Buffers(bufs)
	return nb.WriteTo(o.f)
}
func (fileOut) Tick() error   { return nil }
func (fileOut) Reopen() error { return nil }

// BenchmarkAckRoundTrip sends one record at a time over a unix stream
// socket in the acknowledged mode and waits for its acknowledgement: the
// time from the client's write to the acknowledgement, through the real
// listener, queue and writer (write(2) to a file, no fsync), as the
// latency the mode adds before a record counts as delivered. With the
// listener's default read coalescing (100 µs) and without; "lone" records
// come 2 ms apart (after a quiet spell: acknowledged at once), "back to
// back" ones right after the previous acknowledgement (then at most one
// acknowledgement per ms, see stream.ackEvery).
// Recipe: go test -run '^$' -bench AckRoundTrip -benchtime 2000x ./client/
func BenchmarkAckRoundTrip(b *testing.B) {
	type mode struct {
		coalesce, gap time.Duration
	}
	def := transport.DefaultOptions().ReadCoalesce
	for _, m := range []mode{{def, 2 * time.Millisecond}, {0, 2 * time.Millisecond}, {def, 0}, {0, 0}} {
		name := "lone"
		if m.gap == 0 {
			name = "back-to-back"
		}
		coalesce := m.coalesce
		b.Run(name+"/coalesce="+coalesce.String(), func(b *testing.B) {
			f, err := os.CreateTemp(b.TempDir(), "out")
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			q := pipeline.NewQueue(256, 64<<10, nil)
			pw := pipeline.NewWriter(q, fileOut{f}, nil, nil, 0)
			wctx, stopWriter := context.WithCancel(context.Background())
			wdone := make(chan error, 1)
			go func() { wdone <- pw.Run(wctx) }()
			defer func() { pw.Close(); stopWriter(); <-wdone }()
			opts := transport.DefaultOptions()
			opts.ReadCoalesce = coalesce
			raw := "unix://" + filepath.Join(tempDir(b), "b.sock")
			l, err := transport.Open(raw, transport.Deps{Root: metrics.New(nil), Sink: sink.New(q, sink.Options{HardStop: context.Background(), BatchBytes: 64 << 10}), Opts: opts})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Run(ctx) }()
			defer func() { cancel(); <-done }()
			w, err := Dial(raw, WithAck(0))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				if m.gap > 0 {
					b.StopTimer()
					time.Sleep(m.gap)
					b.StartTimer()
				}
				t0 := time.Now()
				if err := w.Log("INFO", "a record of about a hundred bytes, acknowledged once it is in the file"); err != nil {
					b.Fatal(err)
				}
				want := uint64(w.ackBase + w.written)
				for w.peer.acked.Load() < want {
					<-w.peer.signal
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// A client that does not ask for acknowledgements is never written to,
// even when its first line looks almost like the hello.
func TestNoHelloNoAcknowledgements(t *testing.T) {
	c := transporttest.NewCapture()
	raw := startUnix(t, c)
	conn, err := net.Dial("unix", raw[len("unix://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("\x1elogagg-ack/2\n{\"m\":1}\n{\"m\":2}\n")); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "3 records", func() bool { return c.Len() >= 3 })
	conn.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [16]byte
	if n, err := conn.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %q, %v from the aggregator; want nothing", b[:n], err)
	}
}
