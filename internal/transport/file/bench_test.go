package file_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport"
)

// countSubmitter counts what the input hands over and completes it, as a
// writer that writes nothing would: the input's own cost per line.
type countSubmitter struct {
	records atomic.Int64
	bytes   atomic.Int64
	free    chan *pipeline.Batch
}

func (c *countSubmitter) NewBatch() *pipeline.Batch {
	select {
	case b := <-c.free:
		return b
	default:
		return &pipeline.Batch{Buf: make([]byte, 0, 128<<10)}
	}
}

func (c *countSubmitter) Submit(_ context.Context, b *pipeline.Batch) error {
	c.records.Add(int64(b.Records))
	c.bytes.Add(int64(len(b.Buf)))
	for _, d := range b.Done {
		d.To.Written(d.Mark)
	}
	b.Reset()
	select {
	case c.free <- b:
	default:
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTail reads a file of 100-byte lines from its start into JSON
// lines (the file:// input, the sink and the encoder; no output file):
// lines/s, and the CPU time of the process per line (user and system:
// reading, framing, encoding; the benchmark's polling is a few percent).
//
//	go test -run '^$' -bench BenchmarkTail -benchtime 2000000x ./internal/transport/file/
func BenchmarkTail(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "app.log")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	line := make([]byte, 100)
	buf := make([]byte, 0, 1<<20)
	for i := range b.N {
		copy(line, fmt.Sprintf("seq=%010d ", i))
		for j := 15; j < 99; j++ {
			line[j] = 'a' + byte(i+j)%26
		}
		line[99] = '\n'
		buf = append(buf, line...)
		if len(buf) >= 1<<20-100 {
			f.Write(buf)
			buf = buf[:0]
		}
	}
	f.Write(buf)
	f.Close()
	cs := &countSubmitter{free: make(chan *pipeline.Batch, 64)}
	l, err := transport.Open("file://"+p+"?from=start", transport.Deps{Root: metrics.New(nil),
		Sink: sink.New(cs, sink.Options{}), Opts: transport.DefaultOptions(), StateDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.ResetTimer()
	begin, cpu0 := time.Now(), cpuTime()
	go func() { done <- l.Run(ctx) }()
	for cs.records.Load() < int64(b.N) {
		time.Sleep(200 * time.Microsecond)
	}
	el, cpu := time.Since(begin), cpuTime()-cpu0
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "lines/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/line")
	b.ReportMetric(float64(cs.bytes.Load())/float64(b.N), "out-B/line")
}

// BenchmarkBurst: how far the input falls behind a writer that appends a
// burst faster than it reads, and how soon after the burst it has caught
// up. The writer appends burst lines of 100 B at rate lines/s (in 1 ms
// slices) to a file the input tails; every 2 ms the lines written and the
// lines handed over are compared.
//
//	go test -run '^$' -bench BenchmarkBurst -benchtime 1x ./internal/transport/file/
func BenchmarkBurst(b *testing.B) {
	for _, rate := range []int{1_000_000, 4_000_000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			const burst = 2_000_000
			for range b.N {
				dir := b.TempDir()
				p := filepath.Join(dir, "app.log")
				os.WriteFile(p, []byte("first\n"), 0o644)
				cs := &countSubmitter{free: make(chan *pipeline.Batch, 64)}
				l, err := transport.Open("file://"+p+"?from=start", transport.Deps{Root: metrics.New(nil),
					Sink: sink.New(cs, sink.Options{}), Opts: transport.DefaultOptions(), StateDir: dir})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx) }()
				for cs.records.Load() < 1 {
					time.Sleep(time.Millisecond)
				}
				var written atomic.Int64
				wdone := make(chan time.Time, 1)
				go func() {
					f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
					defer f.Close()
					line := make([]byte, 100)
					var buf []byte
					begin, n := time.Now(), 0
					for n < burst {
						due := min(burst, int(time.Since(begin).Seconds()*float64(rate)))
						buf = buf[:0]
						for ; n < due; n++ {
							copy(line, fmt.Sprintf("seq=%010d ", n))
							for j := 15; j < 99; j++ {
								line[j] = 'a' + byte(n+j)%26
							}
							line[99] = '\n'
							buf = append(buf, line...)
						}
						f.Write(buf)
						written.Store(int64(n))
						time.Sleep(time.Millisecond)
					}
					wdone <- time.Now()
				}()
				var maxLag int64
				var end time.Time
				for cs.records.Load() < burst+1 {
					if lag := written.Load() - (cs.records.Load() - 1); lag > maxLag {
						maxLag = lag
					}
					time.Sleep(2 * time.Millisecond)
				}
				caughtUp := time.Now()
				end = <-wdone
				cancel()
				<-done
				b.ReportMetric(float64(maxLag), "max-lag-lines")
				b.ReportMetric(float64(maxLag*100)/(1<<20), "max-lag-MiB")
				b.ReportMetric(float64(max(0, caughtUp.Sub(end).Milliseconds())), "catch-up-ms")
			}
		})
	}
}

// BenchmarkIdleFiles: what watching 10,000 idle files costs, by inotify
// (directory watches, a rescan every scan interval) and by polling alone,
// in CPU per second of idling, and how soon a line appended to one of
// them arrives.
//
//	go test -run '^$' -bench BenchmarkIdleFiles -benchtime 1x ./internal/transport/file/
func BenchmarkIdleFiles(b *testing.B) {
	const n = 10000
	for _, mode := range []string{"watch=inotify&scan=1s", "watch=inotify", "watch=poll", "watch=poll&scan=1s"} {
		b.Run(mode, func(b *testing.B) {
			for range b.N {
				dir := b.TempDir()
				for i := range n {
					os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.log", i)), []byte(fmt.Sprintf("first %d\n", i)), 0o644)
				}
				cs := &countSubmitter{free: make(chan *pipeline.Batch, 64)}
				l, err := transport.Open("file://"+dir+"/*.log?from=start&"+mode, transport.Deps{Root: metrics.New(nil),
					Sink: sink.New(cs, sink.Options{}), Opts: transport.DefaultOptions(), StateDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx) }()
				for cs.records.Load() < n {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(time.Second) // the first checkpoint of 10,000 files
				const idle = 10 * time.Second
				cpu0 := cpuTime()
				time.Sleep(idle)
				cpu := cpuTime() - cpu0
				var worst time.Duration
				for k := range 5 {
					before := cs.records.Load()
					t0 := time.Now()
					f, _ := os.OpenFile(filepath.Join(dir, fmt.Sprintf("f%05d.log", 1234+k*1000)), os.O_WRONLY|os.O_APPEND, 0)
					f.WriteString("later\n")
					f.Close()
					for cs.records.Load() == before {
						time.Sleep(100 * time.Microsecond)
					}
					worst = max(worst, time.Since(t0))
					time.Sleep(200 * time.Millisecond)
				}
				cancel()
				<-done
				b.ReportMetric(float64(cpu.Milliseconds())/idle.Seconds(), "cpu-ms/s")
				b.ReportMetric(float64(worst.Microseconds())/1000, "worst-latency-ms")
			}
		})
	}
}
