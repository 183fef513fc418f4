package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// collector is an OpenTelemetry Collector receiving OTLP (gRPC on grpc,
// HTTP on http) into a file exporter writing out.
type collector struct {
	grpc, http string
	out        string
	proc       *testenv.CollectorProcess
}

func startCollector(t *testing.T, dir string, grpcPort, httpPort int, out string) *collector {
	t.Helper()
	c := &collector{grpc: fmt.Sprintf("127.0.0.1:%d", grpcPort), http: fmt.Sprintf("127.0.0.1:%d", httpPort), out: out}
	c.proc = testenv.StartCollector(t, fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc: {endpoint: "%s"}
      http: {endpoint: "%s"}
exporters:
  file: {path: "%s", flush_interval: 100ms}
service:
  telemetry: {metrics: {level: none}, logs: {level: warn}}
  pipelines:
    logs: {receivers: [otlp], exporters: [file]}
`, c.grpc, c.http, out), c.grpc)
	return c
}

// collectorStamps reads what file exporters wrote (one OTLP/JSON request
// per line) and counts each record's --seq stamp (its producer_id and seq
// attributes).
func collectorStamps(t *testing.T, files ...string) (map[stampKey]int, int) {
	t.Helper()
	out := map[stampKey]int{}
	records := 0
	var u plog.JSONUnmarshaler
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		r := bufio.NewReaderSize(fh, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				break // a last line still being written is read next time
			}
			ld, err := u.UnmarshalLogs(line)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			for i := range ld.ResourceLogs().Len() {
				sls := ld.ResourceLogs().At(i).ScopeLogs()
				for j := range sls.Len() {
					lrs := sls.At(j).LogRecords()
					for k := range lrs.Len() {
						records++
						a := lrs.At(k).Attributes()
						id, ok1 := a.Get("producer_id")
						seq, ok2 := a.Get("seq")
						if ok1 && ok2 {
							out[stampKey{id.Str(), uint64(seq.Int())}]++
						}
					}
				}
			}
		}
		fh.Close()
	}
	return out, records
}

// waitCollected polls the collector's files until every local stamp is
// there, and returns the counts.
func waitCollected(t *testing.T, local map[stampKey]int, limit time.Duration, files ...string) map[stampKey]int {
	t.Helper()
	got, ok := testenv.Until(limit, func() (map[stampKey]int, bool) {
		got, _ := collectorStamps(t, files...)
		for k := range local {
			if got[k] == 0 {
				return got, false
			}
		}
		return got, true
	})
	if !ok {
		missing := 0
		for k := range local {
			if got[k] == 0 {
				missing++
			}
		}
		t.Fatalf("%d of %d records written locally never reached the Collector within %v", missing, len(local), limit)
	}
	return got
}

func otlpArgs(sock, endpoint string, extra ...string) []string {
	return append([]string{"--listen", "unix://" + sock, "--forward-otlp", endpoint, "--drain-timeout", "5s"}, extra...)
}

func waitOTLPLagZero(t *testing.T, a *aggProc, limit time.Duration) {
	t.Helper()
	last, ok := testenv.Until(limit, func() ([2]float64, bool) {
		lr := a.metric("logagg_forward_otlp_lag_records")
		lb := a.metric("logagg_forward_otlp_lag_bytes")
		return [2]float64{lr, lb}, lr == 0 && lb == 0
	})
	if !ok {
		t.Fatalf("OTLP forwarder lag did not drain within %v: lag_records %v lag_bytes %v\n%s", limit, last[0], last[1], a.log())
	}
}

// The Collector goes away for 10 s mid-stream: the lag grows, then drains
// once it is back, and every record written locally reaches it.
func TestOTLPCollectorOutage(t *testing.T) {
	testenv.Collector(t)
	for _, proto := range []string{"grpc", "http/protobuf"} {
		t.Run(proto, func(t *testing.T) {
			dir := testenv.ShortTempDir(t)
			gp, hp := testenv.FreePort(t), testenv.FreePort(t)
			c1 := startCollector(t, dir, gp, hp, filepath.Join(dir, "c1.json"))
			endpoint := c1.grpc
			if proto != "grpc" {
				endpoint = "http://" + c1.http
			}
			a := startAgg(t, dir, otlpArgs(filepath.Join(dir, "s"), endpoint, "--otlp-protocol", proto)...)
			const rate, count = 2000, 36000 // 18 s of records
			p := startProducer(t, a.url("unix"), "outage", 200, rate, count)
			if v := a.waitMetric(2000, "logagg_forward_otlp_records_exported_total"); v < 2000 {
				t.Fatalf("forwarding did not start: exported %v\n%s", v, a.log())
			}
			c1.proc.Stop()
			down := time.Now()
			var maxLag float64
			// Not a wait: the outage lasts 10 s (the scenario), sampled.
			for time.Since(down) < 10*time.Second {
				maxLag = max(maxLag, a.metric("logagg_forward_otlp_lag_bytes"))
				time.Sleep(200 * time.Millisecond)
			}
			errs := a.metric("logagg_forward_otlp_errors_total")
			t.Logf("collector down 10s: max lag_bytes %.0f, errors %.0f", maxLag, errs)
			if maxLag < 200*2000 || errs == 0 {
				t.Errorf("lag_bytes peaked at %.0f and errors_total is %.0f while the Collector was down", maxLag, errs)
			}
			c2 := startCollector(t, dir, gp, hp, filepath.Join(dir, "c2.json"))
			if sent := p.wait(t, 60*time.Second); sent != count {
				t.Errorf("producer sent %d, want %d", sent, count)
			}
			waitOTLPLagZero(t, a, 60*time.Second)
			local := localStamps(t, a.output)
			if len(local) != count {
				t.Errorf("%d distinct records on disk, producer sent %d", len(local), count)
			}
			got := waitCollected(t, local, 60*time.Second, c1.out, c2.out)
			dups := 0
			for k, n := range got {
				if local[k] == 0 {
					t.Fatalf("the Collector has %v, never written locally", k)
				}
				dups += n - 1
			}
			t.Logf("%d records at the Collector for %d written, %d duplicates (requests in flight when it stopped)", len(got)+dups, len(local), dups)
			a.stop(syscall.SIGTERM)
		})
	}
}

// The aggregator is SIGKILLed mid-stream and started again on the same
// output and checkpoint: every record reaches the Collector, and the only
// duplicates are records after the checkpoint the killed one had saved.
func TestOTLPAggregatorKilled(t *testing.T) {
	testenv.Collector(t)
	dir := testenv.ShortTempDir(t)
	c := startCollector(t, dir, testenv.FreePort(t), testenv.FreePort(t), filepath.Join(dir, "c.json"))
	args := otlpArgs(filepath.Join(dir, "s"), c.grpc)
	a := startAgg(t, dir, args...)
	const count = 24000
	p := startProducer(t, a.url("unix"), "killed", 200, 4000, count) // ~6 s
	if v := a.waitMetric(4000, "logagg_forward_otlp_records_exported_total"); v < 4000 {
		t.Fatalf("forwarding did not start: exported %v\n%s", v, a.log())
	}
	a.proc.Kill()
	ck, found, err := segment.LoadCheckpoint(segment.CheckpointPath(a.output, "otlp"))
	if err != nil || !found {
		t.Fatalf("no checkpoint after 4000 records were acknowledged: found %v err %v", found, err)
	}
	before := stampsBefore(t, a.output, ck)
	t.Logf("killed with checkpoint %v (%d records before it)", ck, len(before))

	b := startAgg(t, dir, args...)
	p.wait(t, 60*time.Second)
	waitOTLPLagZero(t, b, 60*time.Second)
	local := localStamps(t, b.output)
	if len(local) < count/2 {
		t.Fatalf("only %d records on disk of %d sent", len(local), count)
	}
	got := waitCollected(t, local, 60*time.Second, c.out)
	dups := 0
	for k, n := range got {
		if local[k] == 0 {
			t.Fatalf("the Collector has %v, never written locally", k)
		}
		if n > local[k] {
			if before[k] {
				t.Errorf("%v, before the checkpoint, arrived %d times", k, n)
			}
			dups += n - local[k]
		}
	}
	t.Logf("duplicates after SIGKILL and restart: %d, all after checkpoint %v", dups, ck)
	b.stop(syscall.SIGTERM)
}

// stampsBefore is the set of stamps of the lines of the log before pos.
func stampsBefore(t *testing.T, output string, pos segment.Position) map[stampKey]bool {
	t.Helper()
	r, err := segment.NewReader(segment.ReaderConfig{Output: output})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	out := map[stampKey]bool{}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		line, end, err := r.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("reading up to the checkpoint %v: %v", pos, err)
		}
		if pos.Less(end) {
			return out
		}
		if st, ok := seqstamp.Find(line); ok {
			out[stampKey{st.Producer, st.Seq}] = true
		}
		if end == pos {
			return out
		}
	}
}

// check-config reads an OTLP receiver's parameters and forward.otlp
// without binding anything.
func TestCheckConfigOTLP(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		yaml string
		code int
		want string
	}{
		{"listen: [\"otlp://127.0.0.1:4317?ack=written\", \"otlphttp+unix:///tmp/x.sock\"]\nforward: {otlp: {endpoint: \"127.0.0.1:4317\"}}\n", 0, "is valid"},
		{"listen: [\"otlp://127.0.0.1:4317?ack=maybe\"]\n", 1, `ack="maybe"`},
		{"listen: [\"otlphttp://127.0.0.1:0?max_request=8MiB&max_inflight=10MiB\"]\n", 1, "twice max_request"},
		{"listen: [\"otlp://127.0.0.1:0?max_request=16KiB&max_inflight=100KiB\"]\n", 1, "HTTP/2's 64 KiB window"},
		{"listen: [\"otlphttp://127.0.0.1:0?max_request=16KiB&max_inflight=100KiB\"]\n", 0, "is valid"},
		{"listen: [\"unix:///tmp/x.sock\"]\nforward: {otlp: {endpoint: \"127.0.0.1:4317\", protocol: thrift}}\n", 1, "protocol"},
	} {
		p := filepath.Join(dir, "c.yaml")
		os.WriteFile(p, []byte(c.yaml), 0o600)
		var out, errb strings.Builder
		if code := checkConfigCommand([]string{p}, &out, &errb); code != c.code || !strings.Contains(out.String()+errb.String(), c.want) {
			t.Errorf("%q: exit %d (want %d), output %q %q, want %q in it", c.yaml, code, c.code, out.String(), errb.String(), c.want)
		}
	}
}
