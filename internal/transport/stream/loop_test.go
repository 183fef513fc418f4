package stream_test

import (
	"context"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// serveUnix runs ServeListener on a fresh unix socket until the returned
// stop is called; stop returns how long the listener took to finish.
func serveUnix(t *testing.T, o transport.Options) (path string, out *transporttest.Capture, stop func() time.Duration) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	out = transporttest.NewCapture()
	m := metrics.New(nil).ForListener("unix://" + path)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		stream.ServeListener(ctx, ln, stream.ListenerConfig{Transport: "unix", URL: "unix://" + path, ReadCoalesce: o.ReadCoalesce,
			Deps: transport.Deps{Sink: sink.New(out, sink.Options{HardStop: context.Background(), BatchBytes: 64 << 10}), Metrics: m, Opts: o}})
	}()
	stop = func() time.Duration {
		start := time.Now()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("ServeListener did not return within 30s of the stop")
		}
		return time.Since(start)
	}
	t.Cleanup(func() { stop() })
	return path, out, stop
}

// With read coalescing a producer writing one record per write(2) as fast
// as it can is read in a few large reads (one batch each) instead of one
// read per record or two, and every record arrives in order. Without it the
// same stream is delivered too (the count of reads is then up to the
// scheduler, so only logged).
func TestReadCoalescingReadsManyWritesAtOnce(t *testing.T) {
	const records = 20000
	for _, coalesce := range []time.Duration{0, 100 * time.Microsecond} {
		t.Run(fmt.Sprint("coalesce=", coalesce), func(t *testing.T) {
			o := transport.DefaultOptions()
			o.ReadCoalesce = coalesce
			path, out, _ := serveUnix(t, o)
			c, err := net.Dial("unix", path)
			if err != nil {
				t.Fatal(err)
			}
			reads0 := stream.Reads()
			start := time.Now()
			for i := range records {
				if _, err := fmt.Fprintf(c, "record %d\n", i); err != nil {
					t.Fatal(err)
				}
			}
			writing := time.Since(start)
			c.Close()
			recs := waitLen(t, out, records)
			for i, r := range recs {
				if want := fmt.Sprintf("record %d", i); r.Message != want {
					t.Fatalf("record %d is %q, want %q", i, r.Message, want)
				}
			}
			reads := stream.Reads() - reads0
			t.Logf("%d records written in %v arrived in %d batches, %d reads", records, writing, out.Batches(), reads)
			if coalesce == 0 {
				return
			}
			// Each short read is followed by a pause of at least 100 µs, so
			// the reads are at most writing/100µs (+1 for the EOF): below a
			// quarter of the records unless writing took over half a second.
			if reads == 0 || (writing < 500*time.Millisecond && reads > records/4) {
				t.Errorf("%d reads for %d records: reads were not coalesced", reads, records)
			}
		})
	}
}

// An idle connection is ended by the drain's shutdown(2) at once (EOF
// after what it sent): the listener finishes without waiting out the drain
// grace, and keeps what was sent before.
func TestDrainEndsIdleConnectionAtOnce(t *testing.T) {
	o := transport.DefaultOptions()
	o.DrainGrace = 10 * time.Second
	path, out, stop := serveUnix(t, o)
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("before the stop\n"))
	waitLen(t, out, 1)
	if took := stop(); took > 500*time.Millisecond {
		t.Fatalf("ServeListener took %v to drain an idle connection (grace 10s)", took)
	}
	if recs, err := out.Records(); err != nil || len(recs) != 1 || recs[0].Message != "before the stop" {
		t.Fatalf("records %v, %v", recs, err)
	}
	// The producer's next write fails: the read side was shut down, and
	// stop returned once ServeListener had closed every connection.
	if _, err := c.Write([]byte("after\n")); err == nil {
		if _, err = c.Write([]byte("after\n")); err == nil {
			t.Error("writes after the drain still succeed")
		}
	}
}
