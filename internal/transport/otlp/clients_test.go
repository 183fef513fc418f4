package otlp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestPythonSDK: Python's OpenTelemetry SDK, through its logging bridge
// and its gRPC and HTTP exporters, delivers every record.
func TestPythonSDK(t *testing.T) {
	py := testenv.OTelPython(t)
	for _, c := range []struct{ name, url string }{{"grpc", "otlp://127.0.0.1:0"}, {"http", "otlphttp://127.0.0.1:0"}} {
		t.Run(c.name, func(t *testing.T) {
			e := startEnv(t, c.url, options())
			endpoint := "http://" + hostPort(e.l.URL())
			if c.name == "http" {
				endpoint += "/v1/logs"
			}
			const n = 2000
			cmd := exec.Command(py, "testdata/send.py", c.name, endpoint, strconv.Itoa(n), "py")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("send.py: %v\n%s", err, out)
			}
			recs := e.lines(n)
			seen := map[string]bool{}
			for _, r := range recs {
				seen[r["message"].(string)] = true
			}
			for i := range n {
				if m := fmt.Sprintf("py %06d", i); !seen[m] {
					t.Fatalf("%q missing", m)
				}
			}
			r := recs[0]
			if r["level"] != "warn" || r["severity_text"] != "WARN" || r["source"] != "py-app" {
				t.Errorf("record %v", r)
			}
			if a, _ := r["attributes"].(map[string]any); a["user.id"] != 42.0 {
				t.Errorf("attributes %v", r["attributes"])
			}
			if s, _ := r["scope"].(map[string]any); s["name"] != "py.shop" {
				t.Errorf("scope %v", r["scope"])
			}
			peer, _ := r["agg"].(map[string]any)["peer"].(map[string]any)
			if peer == nil || peer["pid"] == float64(os.Getpid()) || peer["via"] != "lookup" {
				t.Errorf("agg.peer = %v, want the Python process found by lookup", peer)
			}
		})
	}
}

// TestCollectorForwardsToUs: an OpenTelemetry Collector whose OTLP and
// OTLP/HTTP exporters point at our receivers delivers every record the Go
// SDK sent it, mapped as the SDK sent it.
func TestCollectorForwardsToUs(t *testing.T) {
	testenv.Collector(t)
	g := startEnv(t, "otlp://127.0.0.1:0", options())
	h := startEnv(t, "otlphttp://127.0.0.1:0", options())
	in := testenv.FreePort(t)
	testenv.StartCollector(t, fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:%d"}
exporters:
  otlp: {endpoint: "%s", tls: {insecure: true}, compression: zstd}
  otlphttp: {endpoint: "http://%s", compression: gzip}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines:
    logs: {receivers: [otlp], exporters: [otlp, otlphttp]}
`, in, hostPort(g.l.URL()), hostPort(h.l.URL())), fmt.Sprintf("127.0.0.1:%d", in))
	ctx := context.Background()
	exp, err := otlploggrpc.New(ctx, otlploggrpc.WithEndpoint(fmt.Sprintf("127.0.0.1:%d", in)), otlploggrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	lp := provider(exp)
	const n = 3000
	emit(lp, n, "via-collector")
	if err := lp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range []*env{g, h} {
		recs := e.lines(n)
		seen := map[string]bool{}
		for _, r := range recs {
			seen[r["message"].(string)] = true
		}
		if len(seen) != n {
			t.Errorf("%s: %d distinct records, want %d", e.l.URL(), len(seen), n)
		}
		checkMapped(t, recs[0], map[*env]string{g: "otlp", h: "otlphttp"}[e])
	}
}
