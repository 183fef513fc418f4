package kafka

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// BenchmarkForward200B ships b.N pre-written 200-byte records through the
// forwarder and reports records/s and the forwarder process's CPU time per
// record. Against kfake the CPU includes the in-process fake broker; for
// the real figure start a broker and set LOGAGG_KAFKA_BROKERS:
//
//	export LOGAGG_KAFKA_BROKERS=$(scripts/kafka.sh start)
//	go test -run '^$' -bench Forward200B -benchtime 500000x ./internal/forward/kafka
func BenchmarkForward200B(b *testing.B) {
	brokers := strings.Split(os.Getenv(envBrokers), ",")
	if brokers[0] == "" {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		brokers = c.ListenAddrs()
	}
	topic := newTopic(b, brokers, 1)
	l := newTestLog(b, 200)
	for left := b.N; left > 0; left -= 10000 {
		l.write("bench", min(left, 10000))
	}
	b.SetBytes(l.written / int64(b.N))
	cfg := testConfig(brokers, topic, l.output)
	cfg.Key = KeyHost
	cfg.Linger = 5 * time.Millisecond
	cfg.CheckpointInterval = 50 * time.Millisecond
	f, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	go func() { done <- f.Run(ctx) }()
	want := l.end()
	for f.Stats().Acked.Less(want) {
		time.Sleep(time.Millisecond)
	}
	el := time.Since(t0)
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(syscall.TimevalToNsec(ru1.Utime) + syscall.TimevalToNsec(ru1.Stime) -
		syscall.TimevalToNsec(ru0.Utime) - syscall.TimevalToNsec(ru0.Stime))
	b.ReportMetric(float64(b.N)/el.Seconds(), "records/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
}
