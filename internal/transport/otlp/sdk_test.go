package otlp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/log"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/transport"
	_ "github.com/ipclab/logagg/internal/transport/otlp"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

// env is one running receiver whose records a Capture keeps.
type env struct {
	t        testing.TB
	l        transport.Listener
	m        *metrics.Metrics
	cap      *transporttest.Capture
	cancel   context.CancelFunc
	hardStop context.CancelFunc
	done     chan error
}

func startEnv(t testing.TB, raw string, o transport.Options) *env {
	t.Helper()
	return startEnvFDs(t, raw, o, nil)
}

// startEnvFDs is startEnv with the daemon's descriptor gate.
func startEnvFDs(t testing.TB, raw string, o transport.Options, fds *transport.FDGate) *env {
	t.Helper()
	e := &env{t: t, m: metrics.New(nil), cap: transporttest.NewCapture(), done: make(chan error, 1)}
	hard, hardStop := context.WithCancel(context.Background())
	t.Cleanup(hardStop)
	e.hardStop = hardStop
	l, err := transport.Open(raw, transport.Deps{Root: e.m, Sink: sink.New(e.cap, sink.Options{HardStop: hard, BatchBytes: 16 << 10}), Opts: o, FDs: fds})
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	e.l = l
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- l.Run(ctx) }()
	t.Cleanup(func() {
		e.cap.Unblock()
		e.stop()
	})
	return e
}

func (e *env) stop() error {
	e.cancel()
	select {
	case err := <-e.done:
		e.done <- err
		return err
	case <-time.After(30 * time.Second):
		e.t.Fatalf("Run did not return within 30s of cancel")
		return nil
	}
}

func options() transport.Options {
	o := transport.DefaultOptions()
	o.DrainGrace = time.Second
	o.SocketGID = -1
	return o
}

// lines waits for n records and returns them decoded whole.
func (e *env) lines(n int) []map[string]any {
	e.t.Helper()
	testenv.Eventually(e.t, 30*time.Second, fmt.Sprintf("%d records", n), func() bool { return e.cap.Len() >= n })
	recs, err := e.cap.Records()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]map[string]any, len(recs))
	for i, r := range recs {
		if err := json.Unmarshal(r.Raw, &out[i]); err != nil {
			e.t.Fatal(err)
		}
	}
	return out
}

func hostPort(raw string) string {
	_, hp, _ := strings.Cut(raw, "://")
	hp, _, _ = strings.Cut(hp, "?")
	return hp
}

// provider is the Go SDK's logger provider exporting through exp.
func provider(exp sdklog.Exporter) *sdklog.LoggerProvider {
	res := resource.NewSchemaless(attribute.String("service.name", "checkout"), attribute.String("host.name", "web-1"))
	return sdklog.NewLoggerProvider(sdklog.WithResource(res),
		sdklog.WithProcessor(sdklog.NewBatchProcessor(exp, sdklog.WithExportInterval(10*time.Millisecond), sdklog.WithMaxQueueSize(1<<20))))
}

func emit(lp *sdklog.LoggerProvider, n int, prefix string) {
	logger := lp.Logger("shop/cart", log.WithInstrumentationVersion("1.2.3"))
	tid, _ := trace.TraceIDFromHex("0102030405060708090a0b0c0d0e0f10")
	sid, _ := trace.SpanIDFromHex("1112131415161718")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: 1}))
	for i := range n {
		var r log.Record
		r.SetTimestamp(time.Unix(1795382047, 123456789))
		r.SetSeverity(log.SeverityWarn)
		r.SetSeverityText("WARN")
		r.SetBody(attribute.StringValue(fmt.Sprintf("%s %06d", prefix, i)))
		r.AddAttributes(attribute.Int("http.status", 503), attribute.Map("user", attribute.String("id", "42"), attribute.Bool("admin", false)))
		logger.Emit(ctx, r)
	}
}

func checkMapped(t *testing.T, rec map[string]any, transportName string) {
	t.Helper()
	want := map[string]any{
		"timestamp": "2026-11-22T21:14:07.123456789Z", "level": "warn", "severity_number": 13.0, "severity_text": "WARN",
		"source": "checkout", "trace_id": "0102030405060708090a0b0c0d0e0f10", "span_id": "1112131415161718", "trace_flags": 1.0,
	}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v in %v", k, rec[k], v, rec)
		}
	}
	attrs, _ := rec["attributes"].(map[string]any)
	if attrs["http.status"] != 503.0 || attrs["user"].(map[string]any)["id"] != "42" {
		t.Errorf("attributes %v", attrs)
	}
	res, _ := rec["resource"].(map[string]any)
	if res["service.name"] != "checkout" || res["host.name"] != "web-1" {
		t.Errorf("resource %v", res)
	}
	scope, _ := rec["scope"].(map[string]any)
	if scope["name"] != "shop/cart" || scope["version"] != "1.2.3" {
		t.Errorf("scope %v", scope)
	}
	if _, ok := rec["observed_timestamp"].(string); !ok {
		t.Errorf("no observed_timestamp in %v", rec)
	}
	agg, _ := rec["agg"].(map[string]any)
	if agg["transport"] != transportName || agg["format"] != "json" {
		t.Errorf("agg %v", agg)
	}
}

// TestGoSDK sends through the Go SDK's gRPC and HTTP exporters, over TCP
// and unix sockets, and checks every record arrives, mapped.
func TestGoSDK(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	cases := []struct {
		name, url string
		exporter  func(ctx context.Context, raw string) (sdklog.Exporter, error)
	}{
		{"grpc", "otlp://127.0.0.1:0", func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			return otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(hostPort(raw)), otlploggrpc.WithInsecure())
		}},
		{"grpc_gzip", "otlp://127.0.0.1:0", func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			return otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(hostPort(raw)), otlploggrpc.WithInsecure(), otlploggrpc.WithCompressor("gzip"))
		}},
		{"http", "otlphttp://127.0.0.1:0", func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			return otlploghttp.New(ctx, otlploghttp.WithEndpoint(hostPort(raw)), otlploghttp.WithInsecure())
		}},
		{"http_gzip", "otlphttp://127.0.0.1:0", func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			return otlploghttp.New(ctx, otlploghttp.WithEndpoint(hostPort(raw)), otlploghttp.WithInsecure(), otlploghttp.WithCompression(otlploghttp.GzipCompression))
		}},
		{"grpc_unix", "otlp+unix://" + filepath.Join(dir, "g.sock"), func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			conn, err := grpc.NewClient("unix://"+strings.TrimPrefix(raw, "otlp+unix://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return nil, err
			}
			return otlploggrpc.New(ctx, otlploggrpc.WithGRPCConn(conn))
		}},
		{"http_unix", "otlphttp+unix://" + filepath.Join(dir, "h.sock"), func(ctx context.Context, raw string) (sdklog.Exporter, error) {
			path := strings.TrimPrefix(raw, "otlphttp+unix://")
			hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", path)
			}}}
			return otlploghttp.New(ctx, otlploghttp.WithEndpoint("localhost"), otlploghttp.WithInsecure(), otlploghttp.WithHTTPClient(hc))
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := startEnv(t, c.url, options())
			ctx := context.Background()
			exp, err := c.exporter(ctx, e.l.URL())
			if err != nil {
				t.Fatal(err)
			}
			lp := provider(exp)
			const n = 3000
			emit(lp, n, "sdk")
			if err := lp.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown (flush): %v", err)
			}
			recs := e.lines(n)
			if len(recs) != n {
				t.Fatalf("%d records, want %d", len(recs), n)
			}
			seen := map[string]bool{}
			for _, r := range recs {
				seen[r["message"].(string)] = true
			}
			for i := range n {
				if m := fmt.Sprintf("sdk %06d", i); !seen[m] {
					t.Fatalf("record %q missing", m)
				}
			}
			scheme, _, _ := strings.Cut(e.l.URL(), "://")
			checkMapped(t, recs[0], scheme)
			peer, _ := recs[0]["agg"].(map[string]any)["peer"].(map[string]any)
			if peer == nil || peer["pid"] != float64(os.Getpid()) {
				t.Errorf("agg.peer = %v, want our pid %d", peer, os.Getpid())
			}
		})
	}
}
