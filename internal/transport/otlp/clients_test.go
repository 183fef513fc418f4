package otlp_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploggrpc"

	"github.com/ipclab/logagg/internal/testenv"
)

// TestPythonSDK: Python's OpenTelemetry SDK, through its logging bridge
// and its gRPC and HTTP exporters, delivers every record, in plain text and
// over mutual TLS (its certificates from the OTEL_EXPORTER_OTLP_* variables).
func TestPythonSDK(t *testing.T) {
	py := testenv.OTelPython(t)
	server, client := testenv.NewPKI(t, t.TempDir())
	for _, c := range []struct {
		name, url string
		mtls      bool
	}{
		{"grpc", "otlp://127.0.0.1:0", false},
		{"http", "otlphttp://127.0.0.1:0", false},
		{"grpc_mtls", tlsURL("otlp", server, client.CAFile), true},
		{"http_mtls", tlsURL("otlphttp", server, client.CAFile), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := startEnv(t, c.url, options())
			endpoint := "http://" + hostPort(e.l.URL())
			if c.mtls {
				endpoint = "https://" + hostPort(e.l.URL())
			}
			proto, _, _ := strings.Cut(c.name, "_")
			if proto == "http" {
				endpoint += "/v1/logs"
			}
			const n = 2000
			cmd := exec.Command(py, "testdata/send.py", proto, endpoint, strconv.Itoa(n), "py")
			if c.mtls {
				// requests lets REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE (set on
				// this machine) override the CA the HTTP exporter gives it
				// (psf/requests#3829): a user of that exporter must unset them.
				for _, kv := range os.Environ() {
					if !strings.HasPrefix(kv, "REQUESTS_CA_BUNDLE=") && !strings.HasPrefix(kv, "CURL_CA_BUNDLE=") {
						cmd.Env = append(cmd.Env, kv)
					}
				}
				cmd.Env = append(cmd.Env, "OTEL_EXPORTER_OTLP_CERTIFICATE="+server.CAFile,
					"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE="+client.CertFile, "OTEL_EXPORTER_OTLP_CLIENT_KEY="+client.KeyFile)
			}
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
// OTLP/HTTP exporters point at our receivers, in plain text and over
// mutual TLS, delivers every record the Go SDK sent it to each, mapped as
// the SDK sent it.
func TestCollectorForwardsToUs(t *testing.T) {
	testenv.Collector(t)
	g := startEnv(t, "otlp://127.0.0.1:0", options())
	h := startEnv(t, "otlphttp://127.0.0.1:0", options())
	server, client := testenv.NewPKI(t, t.TempDir())
	gs := startEnv(t, tlsURL("otlp", server, client.CAFile), options())
	hs := startEnv(t, tlsURL("otlphttp", server, client.CAFile), options())
	tlsConf := fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q}", server.CAFile, client.CertFile, client.KeyFile)
	in := testenv.FreePort(t)
	testenv.StartCollector(t, fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "127.0.0.1:%d"}
exporters:
  otlp: {endpoint: "%s", tls: {insecure: true}, compression: zstd}
  otlphttp: {endpoint: "http://%s", compression: gzip}
  otlp/mtls: {endpoint: "%s", tls: %s}
  otlphttp/mtls: {endpoint: "https://%s", tls: %s}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines:
    logs: {receivers: [otlp], exporters: [otlp, otlphttp, otlp/mtls, otlphttp/mtls]}
`, in, hostPort(g.l.URL()), hostPort(h.l.URL()), hostPort(gs.l.URL()), tlsConf, hostPort(hs.l.URL()), tlsConf), fmt.Sprintf("127.0.0.1:%d", in))
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
	for _, e := range []*env{g, h, gs, hs} {
		recs := e.lines(n)
		seen := map[string]bool{}
		for _, r := range recs {
			seen[r["message"].(string)] = true
		}
		if len(seen) != n {
			t.Errorf("%s: %d distinct records, want %d", e.l.URL(), len(seen), n)
		}
		checkMapped(t, recs[0], map[*env]string{g: "otlp", h: "otlphttp", gs: "otlp", hs: "otlphttp"}[e])
	}
}
