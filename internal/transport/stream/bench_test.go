package stream_test

import (
	"context"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"io"
	"strings"
	"testing"

	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/stream"
)

// discard is a Submitter that reuses one batch: it measures the reader, not
// a queue.
type discard struct{ b pipeline.Batch }

func (d *discard) NewBatch() *pipeline.Batch { return &d.b }
func (d *discard) Submit(_ context.Context, b *pipeline.Batch) error {
	b.Reset()
	return nil
}

// lines yields n copies of a line, up to 64 KiB per Read, like a socket.
type lines struct {
	block []byte // whole lines
	left  int    // lines still to deliver
	per   int    // lines per block
	size  int    // bytes per line
}

func (l *lines) Read(p []byte) (int, error) {
	if l.left == 0 {
		return 0, io.EOF
	}
	k := min(l.left, l.per, len(p)/l.size)
	if k == 0 {
		return copy(p, l.block[:l.size]), nil // tiny reads are not benchmarked
	}
	l.left -= k
	return copy(p, l.block[:k*l.size]), nil
}

// BenchmarkServe reads 100-byte lines (and a few other sizes) from memory
// through the full framing and encoding path into a discarding submitter.
// Recipe: go test -run=^$ -bench=Serve -benchmem ./internal/transport/stream/
func BenchmarkServe(b *testing.B) {
	for _, size := range []int{100, 1000} {
		for _, octet := range []bool{false, true} {
			b.Run(fmt.Sprintf("line=%dB/octet=%v", size, octet), func(b *testing.B) {
				line := strings.Repeat("x", size-1) + "\n"
				per := (64 << 10) / size
				block := []byte(strings.Repeat(line, per))
				meta := &record.Meta{Transport: "bench", Listener: "bench"}
				meta.Prepare()
				sub := &discard{}
				d := transport.Deps{Sink: sink.New(sub, sink.Options{HardStop: context.Background(), BatchBytes: 64 << 10}), Opts: transport.DefaultOptions()}
				const n = 100_000
				// Warm up the batch buffer so steady state is measured.
				stream.Serve(&lines{block: block, left: n, per: per, size: size}, meta, d, octet)
				b.SetBytes(int64(n * size))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := stream.Serve(&lines{block: block, left: n, per: per, size: size}, meta, d, octet); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
				b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
					stream.Serve(&lines{block: block, left: n, per: per, size: size}, meta, d, octet)
				}))/n, "allocs/record")
			})
		}
	}
}
