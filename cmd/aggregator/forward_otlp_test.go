package main

import (
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/testenv"
)

// forward --forward-otlp ships a log to an OTLP endpoint, here a second
// aggregator whose receiver (gRPC, then HTTP) requires a client
// certificate of its CA: --once exits 0 with every record there exactly
// once and the checkpoint at the end of the log, and a second --once
// ships nothing again.
func TestForwardOTLPOnceOverMutualTLS(t *testing.T) {
	for _, tc := range []struct{ proto, scheme, endpointScheme string }{
		{"grpc", "otlp", ""},
		{"http/protobuf", "otlphttp", "https://"},
	} {
		t.Run(tc.scheme, func(t *testing.T) {
			dir := testenv.ShortTempDir(t)
			server, client := testenv.NewPKI(t, dir)
			recvDir := filepath.Join(dir, "recv")
			if err := os.Mkdir(recvDir, 0o755); err != nil {
				t.Fatal(err)
			}
			q := url.Values{"tls_cert": {server.CertFile}, "tls_key": {server.KeyFile}, "tls_client_ca": {client.CAFile}}
			r := startAgg(t, recvDir, "--listen", tc.scheme+"://127.0.0.1:0?"+q.Encode())
			u, err := url.Parse(r.url(tc.scheme))
			if err != nil {
				t.Fatal(err)
			}
			endpoint := tc.endpointScheme + u.Host

			output := filepath.Join(dir, "app.jsonl")
			const n = 2000
			writeLog(t, output, "ot", 1, n+1, 700, false) // two rotated segments and the active file
			args := []string{"--from", output, "--forward-otlp", endpoint, "--otlp-protocol", tc.proto,
				"--otlp-tls-ca", client.CAFile, "--otlp-tls-cert", client.CertFile, "--otlp-tls-key", client.KeyFile, "--once"}
			var errb syncBuffer
			if code := forwardCommand(args, &errb); code != 0 {
				t.Fatalf("forward --once: exit %d\n%s", code, errb.String())
			}
			if out := errb.String(); !strings.Contains(out, "shipping "+output+" from the start of the log") ||
				!strings.Contains(out, "to OTLP endpoint "+endpoint) {
				t.Errorf("the start line does not say what it does:\n%s", out)
			}
			ck, found, err := segment.LoadCheckpoint(segment.CheckpointPath(output, "otlp"))
			active, _ := segment.ActiveSeq(output)
			st, _ := os.Stat(output)
			if err != nil || !found || ck != (segment.Position{Seq: active, Offset: st.Size()}) {
				t.Fatalf("checkpoint after --once: %v (found %v, err %v), want the end of the log %d:%d", ck, found, err, active, st.Size())
			}
			seen := waitReceived(t, r.output, "ot", n)
			for i := 1; i <= n; i++ {
				if seen[i] != 1 {
					t.Fatalf("seq %d arrived %d times, want once", i, seen[i])
				}
			}

			errb = syncBuffer{}
			if code := forwardCommand(args, &errb); code != 0 {
				t.Fatalf("second forward --once: exit %d\n%s", code, errb.String())
			}
			if !strings.Contains(errb.String(), "from checkpoint "+ck.String()) {
				t.Errorf("the second run does not resume from %v:\n%s", ck, errb.String())
			}
			if got := len(readRecords(t, r.output)); got != n {
				t.Errorf("%d records at the receiver after the second --once, want %d (nothing shipped again)", got, n)
			}
		})
	}
}

// waitReceived waits until the aggregator's output holds n records of
// producer id (the stamp the forwarder carried as attributes) and returns
// how often each seq arrived.
func waitReceived(t *testing.T, output, id string, n int) map[int]int {
	t.Helper()
	seen, ok := testenv.Until(30*time.Second, func() (map[int]int, bool) {
		seen := map[int]int{}
		count := 0
		for _, rec := range readRecords(t, output) {
			attrs, _ := rec["attributes"].(map[string]any)
			if attrs["producer_id"] == id {
				seq, _ := attrs["seq"].(float64)
				seen[int(seq)]++
				count++
			}
		}
		return seen, count >= n
	})
	if !ok {
		t.Fatalf("%d distinct records of %s at the receiver within 30s, want %d", len(seen), id, n)
	}
	return seen
}
