package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	attr "go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/grpc"

	"github.com/ipclab/logagg/internal/otlpwire"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/testenv"
)

// The OTLP benchmarks (docs/benchmarks.md, "OTLP"): logagg's receivers
// beside the OpenTelemetry Collector's, and logagg's forwarder into a
// Collector, in one run. They take a few minutes, so they run only when
// asked:
//
//	LOGAGG_OTLP_BENCH=1 go test -run '^TestOTLPBench' -v -timeout 30m ./cmd/aggregator
//
// LOGAGG_OTLP_BENCH_TARGETS and LOGAGG_OTLP_BENCH_PROTOCOLS choose the In
// cells ("logagg collector", "grpc http"; e.g. "logagg" and "grpc" to
// compare two builds through LOGAGG_BIN_DIR), LOGAGG_OTLP_BENCH_ARGS adds
// flags to the aggregator of the In cells (e.g. "--output /dev/null"),
// LOGAGG_OTLP_BENCH_SECONDS sets each In cell's length (default 8),
// LOGAGG_OTLP_BENCH_RECORDS the records of the Out runs (default 3M), and
// LOGAGG_OTLP_BENCH_PROFILE a directory for the aggregator's CPU profiles
// of the In cells.
func benchEnabled(t *testing.T) {
	if os.Getenv("LOGAGG_OTLP_BENCH") == "" {
		t.Skip("a benchmark: set LOGAGG_OTLP_BENCH=1 to run it")
	}
	testenv.Collector(t)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// cpuOf is the CPU time process pid has used (user + system).
func cpuOf(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100) // USER_HZ
}

// sdkRecords are n records as the Go SDK's logger makes them: a 100-byte
// message, a severity, two attributes, in one resource and scope.
func sdkRecords(n int) []sdklog.Record {
	var got []sdklog.Record
	var mu sync.Mutex
	lp := sdklog.NewLoggerProvider(sdklog.WithResource(resource.NewSchemaless(attr.String("service.name", "bench"))),
		sdklog.WithProcessor(collect{&got, &mu}))
	l := lp.Logger("bench/load")
	msg := strings.Repeat("m", 90)
	for i := range n {
		var r log.Record
		r.SetTimestamp(time.Now())
		r.SetSeverity(log.SeverityInfo)
		r.SetBody(attr.StringValue(fmt.Sprintf("%s %08d", msg, i)))
		r.AddAttributes(attr.Int("seq", i), attr.String("user", "42"))
		l.Emit(context.Background(), r)
	}
	return got
}

type collect struct {
	recs *[]sdklog.Record
	mu   *sync.Mutex
}

func (c collect) OnEmit(_ context.Context, r *sdklog.Record) error {
	c.mu.Lock()
	*c.recs = append(*c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}
func (collect) Enabled(context.Context, sdklog.EnabledParameters) bool { return true }
func (collect) Shutdown(context.Context) error                         { return nil }
func (collect) ForceFlush(context.Context) error                       { return nil }

// blast exports batch through exp from conc goroutines for d and returns
// the records accepted.
func blast(exp sdklog.Exporter, batch []sdklog.Record, conc int, d time.Duration) int64 {
	var n atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if exp.Export(context.Background(), batch) == nil {
					n.Add(int64(len(batch)))
				}
			}
		})
	}
	wg.Wait()
	return n.Load()
}

// TestOTLPBenchIn: the Go SDK's gRPC and HTTP exporters flat out into
// logagg's receivers and into a Collector (otlpreceiver → file exporter),
// side by side: records/s, and the receiving process's CPU per record.
func TestOTLPBenchIn(t *testing.T) {
	benchEnabled(t)
	secs := time.Duration(envInt("LOGAGG_OTLP_BENCH_SECONDS", 8)) * time.Second
	batch := sdkRecords(512) // the batch processor's default export size
	type row struct {
		target, proto   string
		rate, cpuPerRec float64
	}
	var rows []row
	for _, target := range strings.Fields(cmp.Or(os.Getenv("LOGAGG_OTLP_BENCH_TARGETS"), "logagg collector")) {
		for _, proto := range strings.Fields(cmp.Or(os.Getenv("LOGAGG_OTLP_BENCH_PROTOCOLS"), "grpc http")) {
			dir := testenv.ShortTempDir(t)
			var pid int
			var addr string
			var stop func()
			switch target {
			case "logagg":
				scheme := map[string]string{"grpc": "otlp", "http": "otlphttp"}[proto]
				a := startAgg(t, dir, append([]string{"--listen", scheme + "://127.0.0.1:0", "--pprof"}, strings.Fields(os.Getenv("LOGAGG_OTLP_BENCH_ARGS"))...)...)
				pid, addr = a.pid(), strings.TrimPrefix(a.url(scheme), scheme+"://")
				stop = func() { a.stop(syscall.SIGTERM) }
				if pd := os.Getenv("LOGAGG_OTLP_BENCH_PROFILE"); pd != "" {
					// A CPU profile of the aggregator during the cell.
					go func() {
						u := strings.TrimSuffix(a.metrics, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", int(secs/time.Second)-1)
						time.Sleep(1500 * time.Millisecond)
						if resp, err := http.Get(u); err == nil {
							b, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							os.WriteFile(filepath.Join(pd, "logagg-"+proto+".prof"), b, 0o644)
						}
					}()
				}
			default:
				c := startCollector(t, dir, testenv.FreePort(t), testenv.FreePort(t), filepath.Join(dir, "c.json"))
				pid, addr = c.proc.Cmd.Process.Pid, map[string]string{"grpc": c.grpc, "http": c.http}[proto]
				stop = c.proc.Stop
			}
			var exp sdklog.Exporter
			var err error
			if proto == "grpc" {
				exp, err = otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(addr), otlploggrpc.WithInsecure())
			} else {
				exp, err = otlploghttp.New(context.Background(), otlploghttp.WithEndpoint(addr), otlploghttp.WithInsecure())
			}
			if err != nil {
				t.Fatal(err)
			}
			blast(exp, batch, 4, time.Second) // warm up
			c0, t0 := cpuOf(t, pid), time.Now()
			n := blast(exp, batch, 4, secs)
			el, cpu := time.Since(t0), cpuOf(t, pid)-c0
			exp.Shutdown(context.Background())
			stop()
			rows = append(rows, row{target, proto, float64(n) / el.Seconds(), float64(cpu.Nanoseconds()) / float64(n)})
			t.Logf("%-9s %-4s %9.0f records/s  %6.2f µs CPU per record (%d records, %v CPU in %v)",
				target, proto, float64(n)/el.Seconds(), float64(cpu.Nanoseconds())/float64(n)/1e3, n, cpu, el.Round(time.Millisecond))
		}
	}
	for _, p := range []string{"grpc", "http"} {
		var l, c row
		for _, r := range rows {
			if r.proto == p && r.target == "logagg" {
				l = r
			} else if r.proto == p {
				c = r
			}
		}
		if l.target == "" || c.target == "" {
			continue // a cell left out
		}
		t.Logf("%s: logagg does %.1fx the Collector's records per CPU second (%.0f vs %.0f)", p, c.cpuPerRec/l.cpuPerRec, 1e9/l.cpuPerRec, 1e9/c.cpuPerRec)
	}
}

// TestOTLPBenchOut: the forwarder ships a prefilled log of 100-byte
// messages to a null endpoint (its own ceiling) and to a Collector on
// loopback (otlpreceiver → file exporter); and the Collector's own
// ceiling, from a client sending one pre-encoded request over and over.
func TestOTLPBenchOut(t *testing.T) {
	benchEnabled(t)
	n := envInt("LOGAGG_OTLP_BENCH_RECORDS", 3_000_000)
	dir := testenv.ShortTempDir(t)
	log := filepath.Join(dir, "in.jsonl")
	prefill(t, log, n)
	run := func(name, endpoint string, otherPID int) {
		d := testenv.ShortTempDir(t)
		cp := filepath.Join(d, "ck")
		cfg := filepath.Join(d, "c.yaml")
		os.WriteFile(cfg, []byte(fmt.Sprintf("forward: {otlp: {endpoint: %q, compression: none, checkpoint: %q, from: %q}}\n", endpoint, cp, log)), 0o600)
		c0 := time.Duration(0)
		if otherPID > 0 {
			c0 = cpuOf(t, otherPID)
		}
		t0 := time.Now()
		a := startAgg(t, d, "--listen", "unix://"+filepath.Join(d, "s"), "--config", cfg)
		last, _ := testenv.Until(10*time.Minute, func() (float64, bool) {
			v := a.metric("logagg_forward_otlp_records_exported_total")
			return v, v >= float64(n)
		})
		el := time.Since(t0)
		cpu := cpuOf(t, a.pid())
		var other time.Duration
		if otherPID > 0 {
			other = cpuOf(t, otherPID) - c0
		}
		a.stop(syscall.SIGTERM)
		t.Logf("forwarder → %-9s %9.0f records/s  %5.2f µs forwarder CPU per record  %5.2f µs receiver CPU per record (%0.f records in %v)",
			name, last/el.Seconds(), float64(cpu.Nanoseconds())/last/1e3, float64(other.Nanoseconds())/last/1e3, last, el.Round(time.Millisecond))
	}
	// A null endpoint: accepts every request unread.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ForceServerCodecV2(otlpwire.Codec{}))
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: otlpwire.Service, HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Export", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var r otlpwire.Raw
			return &otlpwire.Raw{}, dec(&r)
		}}}}, struct{}{})
	go srv.Serve(ln)
	defer srv.Stop()
	run("null", ln.Addr().String(), 0)

	c := startCollector(t, dir, testenv.FreePort(t), testenv.FreePort(t), filepath.Join(dir, "c.json"))
	run("collector", c.grpc, c.proc.Cmd.Process.Pid)

	// The Collector's ceiling: requests of 4096 records as the forwarder
	// sends them, encoded once, sent by 4 goroutines for 10 s.
	exp, err := otlploggrpc.New(context.Background(), otlploggrpc.WithEndpoint(c.grpc), otlploggrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	batch := sdkRecords(4096)
	c0, t0 := cpuOf(t, c.proc.Cmd.Process.Pid), time.Now()
	got := blast(exp, batch, 4, 10*time.Second)
	el, cpu := time.Since(t0), cpuOf(t, c.proc.Cmd.Process.Pid)-c0
	exp.Shutdown(context.Background())
	t.Logf("Go SDK    → collector %9.0f records/s  %5.2f µs Collector CPU per record (its ceiling with a client beside it)",
		float64(got)/el.Seconds(), float64(cpu.Nanoseconds())/float64(got)/1e3)
}

// prefill writes n records as the aggregator writes a producer's 100-byte
// messages.
func prefill(t *testing.T, path string, n int) {
	t.Helper()
	l, err := segment.Open(segment.Options{Path: path, MaxSize: 128 << 20}, nil)
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("x", 100)
	now := time.Now().UnixNano()
	buf := make([]byte, 0, 4<<20)
	for i := range n {
		buf = fmt.Appendf(buf, `{"source":"bench","timestamp":"2026-11-26T12:00:00.000000Z","level":"INFO","message":%q,"producer_id":"p1","seq":%d,"sent_ns":%d,`+
			`"agg":{"recv_ns":%d,"transport":"unix","listener":"unix:///tmp/s","peer":{"pid":4242,"uid":1000,"gid":1000,"via":"kernel"},"format":"json"}}`+"\n",
			msg, i, now, now)
		if len(buf) > 4<<20-600 || i == n-1 {
			if _, err := l.WriteBuffers([][]byte{buf}); err != nil {
				t.Fatal(err)
			}
			buf = buf[:0]
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}
