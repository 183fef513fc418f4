package journal_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	"github.com/ipclab/logagg/internal/transport/journal"
	"github.com/ipclab/logagg/internal/transport/journal/journaltest"
)

// realistic renders n entries with the fields journald gives a syslog
// client's message (23 fields, about 680 bytes of export format each),
// numbered from first.
func realistic(first, n int) []byte {
	var b []byte
	for i := first; i < first+n; i++ {
		b = journaltest.AppendExport(b, journaltest.Entry{
			{"_TRANSPORT", "syslog"}, {"PRIORITY", strconv.Itoa(i % 8)}, {"SYSLOG_FACILITY", "3"},
			{"SYSLOG_IDENTIFIER", "app" + strconv.Itoa(i%7)},
			{"MESSAGE", "entry " + strconv.Itoa(i) + " some ordinary log message text of moderate length"},
			{"_PID", strconv.Itoa(1000 + i%50)}, {"_UID", "0"}, {"_GID", "0"}, {"_COMM", "app"},
			{"_EXE", "/usr/bin/app"}, {"_CMDLINE", "/usr/bin/app --flag"},
			{"_SYSTEMD_UNIT", "app" + strconv.Itoa(i%7) + ".service"}, {"_SYSTEMD_CGROUP", "/system.slice/app.service"},
			{"_SYSTEMD_SLICE", "system.slice"}, {"_MACHINE_ID", "3d1219c7c4c5404aaa1f6d2a48adfda4"},
			{"_HOSTNAME", "box"}, {"CODE_FILE", "src/app.c"}, {"CODE_LINE", strconv.Itoa(i % 1000)},
			{"CODE_FUNC", "main"}, {"SEQ", strconv.Itoa(i)},
		})
	}
	return b
}

// BenchmarkDecodeRender is the input's own work per entry, from export
// bytes in memory: decode, render the JSON payload, and the record
// encoder's pass over it (what the sink does with it), no I/O.
// Recipe: go test -run '^$' -bench DecodeRender -benchmem ./internal/transport/journal/
func BenchmarkDecodeRender(b *testing.B) {
	const n = 10_000
	in := realistic(0, n)
	enc := record.NewEncoder()
	meta := &record.Meta{Transport: "journal", Listener: "journal://"}
	meta.Prepare()
	var line []byte
	run := func() {
		d := journal.NewDecoder(bytes.NewReader(in))
		var r journal.Renderer
		for {
			e, err := d.Next()
			if err != nil {
				return
			}
			p, _, flags := r.Render(e)
			line, _ = enc.Append(line[:0], p, meta, flags)
		}
	}
	run()
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		run()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/entry")
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkWhole is what checking an entry against its cursor's hash
// costs (verify.go), on realistic entries as journalctl exports them
// from a file systemd-journal-remote wrote: decoding with the check,
// less decoding alone.
// Recipe: go test -run '^$' -bench 'Whole$' ./internal/transport/journal/
func BenchmarkWhole(b *testing.B) {
	journaltest.Require(b)
	const n = 2_000
	dir := b.TempDir()
	journaltest.Write(b, filepath.Join(dir, "a.journal"), realistic(0, n))
	in, err := exec.Command("journalctl", "--directory="+dir, "--merge", "--output=export").Output()
	if err != nil {
		b.Fatal(err)
	}
	decode := func(check bool) time.Duration {
		t0 := time.Now()
		d := journal.NewDecoder(bytes.NewReader(in))
		for {
			e, err := d.Next()
			if err != nil {
				break
			}
			if check && !journal.Whole(e) {
				b.Fatal("an entry does not add up to its cursor's hash")
			}
		}
		return time.Since(t0)
	}
	var with, without time.Duration
	for b.Loop() {
		without += decode(false)
		with += decode(true)
	}
	b.ReportMetric(float64(without.Nanoseconds())/float64(b.N*n), "decode-ns/entry")
	b.ReportMetric(float64((with-without).Nanoseconds())/float64(b.N*n), "check-ns/entry")
	b.ReportMetric(0, "ns/op")
}

// counter is a Submitter that counts records and reuses one batch.
type counter struct {
	b pipeline.Batch
	n atomic.Int64
}

func (c *counter) NewBatch() *pipeline.Batch { return &c.b }
func (c *counter) Submit(_ context.Context, b *pipeline.Batch) error {
	c.n.Add(int64(b.Records))
	for _, d := range b.Done {
		d.To.Written(d.Mark)
	}
	b.Reset()
	return nil
}

// benchEntries is the size of the benchmarks' journal.
const benchEntries = 200_000

// journalDir writes the benchmarks' journal: 200,000 realistic entries in
// files of systemd-journal-remote (it rotates them), removed at the end.
func journalDir(b *testing.B) string {
	journaltest.Require(b)
	dir := b.TempDir()
	if err := journaltest.WriteErr(filepath.Join(dir, "system.journal"), realistic(0, benchEntries)); err != nil {
		b.Fatal(err)
	}
	return dir
}

func childrenCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report adds entries/s and CPU per entry (ours and journalctl's).
func report(b *testing.B, wall, self, children time.Duration) {
	n := float64(b.N * benchEntries)
	b.ReportMetric(n/wall.Seconds(), "entries/s")
	b.ReportMetric(float64(self.Nanoseconds())/n/1000, "self-µs/entry")
	b.ReportMetric(float64(children.Nanoseconds())/n/1000, "child-µs/entry")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkJournal reads 200,000 realistic entries from journal files
// three ways: the floor, `journalctl -o export --directory DIR >
// /dev/null`; the listener from the start into a counting sink (its
// journalctl, decoding, rendering, encoding, batching); and the real
// aggregator writing JSON lines to a file (--fsync never), timed until
// its metrics say every entry is written. CPU per entry is the process's
// own (self) and its journalctl's (child); the listener runs with three
// pauses after a read that emptied journalctl's pipe.
// Recipe: go build -o bin/ ./cmd/... && LOGAGG_BIN_DIR=$PWD/bin \
// go test -run '^$' -bench 'Journal$' -benchtime 3x ./internal/transport/journal/
func BenchmarkJournal(b *testing.B) {
	dir := journalDir(b)
	b.Run("floor=journalctl-export", func(b *testing.B) {
		c0, t0 := childrenCPU(), time.Now()
		for range b.N {
			cmd := exec.Command("journalctl", "-o", "export", "--directory", dir)
			devnull, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			cmd.Stdout = devnull
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			devnull.Close()
		}
		report(b, time.Since(t0), 0, childrenCPU()-c0)
	})
	for _, pause := range []time.Duration{0, 100 * time.Microsecond, time.Millisecond} {
		b.Run("listener/coalesce="+pause.String(), func(b *testing.B) {
			defer journal.SetReadCoalesce(pause)()
			var wall, self, children time.Duration
			for range b.N {
				c := &counter{}
				d := transport.Deps{Sink: sink.New(c, sink.Options{}), Opts: transport.DefaultOptions(), StateDir: b.TempDir()}
				l, err := transport.Open("journal://"+dir+"?from=start", d)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				s0, c0, t0 := selfCPU(), childrenCPU(), time.Now()
				go func() { done <- l.Run(ctx) }()
				for c.n.Load() < benchEntries {
					time.Sleep(time.Millisecond)
				}
				wall += time.Since(t0)
				s1 := selfCPU()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				// journalctl's CPU is ours to see once it was reaped; it was
				// idle, waiting for more, since the last entry.
				self += s1 - s0
				children += childrenCPU() - c0
			}
			report(b, wall, self, children)
		})
	}
	b.Run("aggregator", func(b *testing.B) {
		bin := testenv.Binary(b, "aggregator")
		var wall, agg, jctl time.Duration
		for range b.N {
			tmp := b.TempDir()
			p, err := harness.Aggregator{Bin: bin, Args: []string{"--listen", "journal://" + dir + "?from=start",
				"--output", filepath.Join(tmp, "out.jsonl"), "--fsync", "never", "--metrics", "127.0.0.1:0"}}.Start(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			for {
				m, err := harness.ScrapeMetrics(context.Background(), p.Metrics())
				if err == nil && m.Sum("logagg_records_out_total", nil) >= benchEntries {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			wall += time.Since(t0)
			// The aggregator's own CPU, and its journalctl's, while both run.
			agg += procCPU(b, p.Pid())
			for _, c := range childPIDs(p.Pid()) {
				jctl += procCPU(b, c)
			}
			if _, err := p.Stop(); err != nil {
				b.Fatal(err)
			}
		}
		report(b, wall, agg, jctl)
	})
}

// procCPU is the user and system time of process pid so far, its own
// (not its children's), from /proc/PID/stat (10 ms resolution).
func procCPU(b *testing.B, pid int) time.Duration {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14 of stat
	sy, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+sy) * 10 * time.Millisecond // USER_HZ 100
}

// childPIDs are the processes whose parent is pid.
func childPIDs(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+2:]))
		if pp, _ := strconv.Atoi(f[1]); pp == pid {
			out = append(out, c)
		}
	}
	return out
}
