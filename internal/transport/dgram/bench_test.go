package dgram

import (
	"context"
	"fmt"
	"github.com/ipclab/logagg/internal/sink"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/transport"
)

// countSink counts records and recycles batches, so the benchmark measures
// the receive path, not the test's bookkeeping.
type countSink struct {
	records atomic.Int64
	pool    sync.Pool
}

func (s *countSink) NewBatch() *pipeline.Batch {
	if b, ok := s.pool.Get().(*pipeline.Batch); ok {
		return b
	}
	return &pipeline.Batch{Buf: make([]byte, 0, 64<<10)}
}

func (s *countSink) Submit(_ context.Context, b *pipeline.Batch) error {
	s.records.Add(int64(b.Records))
	b.Reset()
	s.pool.Put(b)
	return nil
}

// pair returns a receiving conn and a sender for one kind of socket.
func pair(b *testing.B, kind string) (recv Conn, send net.Conn, cfg Config) {
	b.Helper()
	switch kind {
	case "socketpair": // unix dgram pair: no max_dgram_qlen limit between peers
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		conns := make([]net.Conn, 2)
		for i, fd := range fds {
			f := os.NewFile(uintptr(fd), "pair")
			c, err := net.FileConn(f)
			f.Close()
			if err != nil {
				b.Fatal(err)
			}
			conns[i] = c
		}
		return conns[0].(*net.UnixConn), conns[1], Config{Creds: true}
	case "unixgram": // bound path: the receive queue holds net.unix.max_dgram_qlen datagrams
		dir, err := os.MkdirTemp("", "lg")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "b.sock")
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
		if err != nil {
			b.Fatal(err)
		}
		s, err := net.Dial("unixgram", path)
		if err != nil {
			b.Fatal(err)
		}
		return c, s, Config{Creds: true}
	case "udp":
		c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			b.Fatal(err)
		}
		s, err := net.Dial("udp", c.LocalAddr().String())
		if err != nil {
			b.Fatal(err)
		}
		return c, s, Config{SourceAddr: true, MaxDatagram: 65535}
	case "udp-coalesce": // as the udp listener runs by default (--read-coalesce 100µs)
		c, s, cfg := pair(b, "udp")
		cfg.Coalesce = transport.DefaultOptions().ReadCoalesce
		return c, s, cfg
	}
	b.Fatalf("unknown kind %s", kind)
	return nil, nil, Config{}
}

// BenchmarkReceive measures records/s through recvmmsg + framing + encoding
// with one blocking sender on a real socket. Reproduce with
//
//	go test -run '^$' -bench Receive -benchtime 200000x ./internal/transport/dgram/
//
// and state net.unix.max_dgram_qlen (it bounds the "unixgram" case). UDP
// may lose under load; loss% reports the share the kernel dropped (counted).
func BenchmarkReceive(b *testing.B) {
	qlen, _ := os.ReadFile("/proc/sys/net/unix/max_dgram_qlen")
	b.Logf("net.unix.max_dgram_qlen = %s", strings.TrimSpace(string(qlen)))
	for _, kind := range []string{"socketpair", "unixgram", "udp", "udp-coalesce"} {
		for _, size := range []int{100, 1000} {
			b.Run(fmt.Sprintf("%s/%dB", kind, size), func(b *testing.B) { benchReceive(b, kind, size) })
		}
	}
}

func benchReceive(b *testing.B, kind string, size int) {
	recv, send, cfg := pair(b, kind)
	defer send.Close()
	counted := &countSink{}
	m := metrics.New(nil)
	opts := transport.DefaultOptions()
	cfg.Conn = recv
	cfg.Deps = transport.Deps{Sink: sink.New(counted, sink.Options{BatchBytes: 64 << 10}), Metrics: m.ForListener(kind), Opts: opts}
	cfg.Meta = record.Meta{Transport: kind, Listener: kind}
	rx, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rx.Run(ctx) }()
	payload := []byte(strings.Repeat("x", size-1) + "\n")
	dropped := func() int64 {
		return int64(testutil.ToFloat64(m.Dropped.WithLabelValues(kind, metrics.CauseKernelOverflow)))
	}

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() {
		for range b.N {
			if _, err := send.Write(payload); err != nil {
				return
			}
		}
	}()
	for counted.records.Load()+dropped() < int64(b.N) {
		time.Sleep(50 * time.Microsecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	s := rx.Stats()
	got := counted.records.Load()
	b.ReportMetric(float64(got)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(s.Datagrams)/float64(max(s.Calls, 1)), "dgrams/recvmmsg")
	b.ReportMetric(100*float64(dropped())/float64(b.N), "loss%")
	b.Logf("N=%d calls=%d datagrams=%d batch sizes (1,2,3-4,5-8,9-16,17-32,33-64)=%v", b.N, s.Calls, s.Datagrams, s.BatchSizes[:7])
}
