package harness

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// testdata/aggregator-metrics.txt is a real scrape of bin/aggregator's
// /metrics: a unix stream listener that wrote 2000 records, a UDP listener
// whose small receive buffer made the kernel drop 18276 datagrams, and the
// Kafka forwarder, which had forwarded all 3724 records to a local broker.
func readSample(t *testing.T) Metrics {
	t.Helper()
	f, err := os.Open("testdata/aggregator-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := ParseMetrics(f)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const (
	sampleUnix = "unix:///tmp/mscrape/log.sock"
	sampleUDP  = "udp://127.0.0.1:19098"
)

func TestParseMetricsRealScrape(t *testing.T) {
	m := readSample(t)
	out := m.ByLabel("logagg_records_out_total", "listener", nil)
	if len(out) != 2 || out[sampleUnix] != 2000 || out[sampleUDP] != 1724 {
		t.Errorf("records_out_total by listener = %v, want unix 2000, udp 1724", out)
	}
	drops := m.ByLabel("logagg_dropped_total", "listener", map[string]string{"cause": "kernel_rxq_ovfl"})
	if len(drops) != 1 || drops[sampleUDP] != 18276 {
		t.Errorf("kernel drops by listener = %v, want udp 18276", drops)
	}
	if n := m.ByLabel("logagg_dropped_total", "listener", map[string]string{"cause": "no_such_cause"}); len(n) != 0 {
		t.Errorf("a cause no sample has matched %v", n)
	}
	if conns := m.ByLabel("logagg_connections", "listener", nil); len(conns) != 2 || conns[sampleUnix] != 0 {
		t.Errorf("connections (a gauge) = %v, want both listeners at 0", conns)
	}
	for name, want := range map[string]float64{
		"logagg_records_out_total":                    3724, // summed over both listeners
		"logagg_forward_kafka_records_produced_total": 3724,
		"logagg_forward_kafka_bytes_produced_total":   2783813, // written 2.783813e+06
		"logagg_forward_kafka_lag_records":            0,
		"logagg_no_such_metric":                       0,
	} {
		if got := m.Sum(name, nil); got != want {
			t.Errorf("Sum(%s) = %v, want %v", name, got, want)
		}
	}
	if g := m.Sum("go_goroutines", nil); g <= 0 {
		t.Errorf("Sum(go_goroutines) = %v, want a gauge above 0", g)
	}
	b := m.Buckets("logagg_forward_kafka_ack_latency_seconds", nil)
	if len(b) != 23 || b[math.Inf(1)] != 3724 || b[0.8192] != 863 || b[0.4096] != 0 || b[1.6384] != 3724 {
		t.Errorf("ack latency buckets (%d) = %v, want 22 and +Inf: +Inf 3724, 0.8192 863, 1.6384 3724", len(b), b)
	}
	if b := m.Buckets("logagg_forward_kafka_records_produced_total", nil); b != nil {
		t.Errorf("a counter has buckets %v", b)
	}
}

// Labels are matched by name, whatever their order or number: the regular
// expressions this replaced wanted exactly `{cause=…,listener=…}`.
func TestMetricsLabelsByName(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(`# TYPE logagg_dropped_total counter
logagg_dropped_total{listener="udp://a",cause="kernel_rxq_ovfl",shard="1"} 3
logagg_dropped_total{shard="2",cause="kernel_rxq_ovfl",listener="udp://a"} 4
logagg_dropped_total{cause="queue_full",listener="udp://a"} 100
logagg_dropped_total{cause="kernel_rxq_ovfl"} 1000
`))
	if err != nil {
		t.Fatal(err)
	}
	got := m.ByLabel("logagg_dropped_total", "listener", map[string]string{"cause": "kernel_rxq_ovfl"})
	if len(got) != 1 || got["udp://a"] != 7 {
		t.Errorf("ByLabel = %v, want udp://a 7 (a sample without the label left out)", got)
	}
	if s := m.Sum("logagg_dropped_total", nil); s != 1107 {
		t.Errorf("Sum = %v, want 1107", s)
	}
}

func TestParseMetricsRefusesGarbage(t *testing.T) {
	for _, text := range []string{"logagg_x{listener=\"a\" 1\n", "logagg_x one\n", "# TYPE x counter\n# TYPE x gauge\nx 1\n"} {
		if _, err := ParseMetrics(strings.NewReader(text)); err == nil {
			t.Errorf("%q parsed", text)
		}
	}
}

func TestScrapeMetrics(t *testing.T) {
	sample, err := os.ReadFile("testdata/aggregator-metrics.txt")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(sample)
	}))
	defer srv.Close()
	m, err := ScrapeMetrics(context.Background(), srv.URL+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Sum("logagg_records_out_total", nil); got != 3724 {
		t.Errorf("scraped records_out_total = %v, want 3724", got)
	}
	if _, err := ScrapeMetrics(context.Background(), srv.URL+"/nothing"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a 404 gave %v, want an error saying so", err)
	}
}
