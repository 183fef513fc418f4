package forwardbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/harness"
	"github.com/ipclab/logagg/internal/bench/throughput"
	"github.com/ipclab/logagg/internal/testenv"
)

// Measure against an in-process kfake cluster (the aggregator child
// process dials its TCP port): the accounting must show every written
// record acknowledged, a rate, samples, and both CPU figures.
func TestMeasureKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const count = 3000
	res, err := Measure(context.Background(), Spec{
		Spec: throughput.Spec{
			AggregatorBin: testenv.Binary(t, "aggregator"),
			ProducerBin:   testenv.Binary(t, "producer"),
			Dir:           testenv.ShortTempDir(t),
			Transports:    []string{"unixsock"},
			Producers:     1,
			Size:          200,
			Rate:          3000,
			Count:         count,
		},
		Brokers:    c.ListenAddrs(),
		Baseline:   true,
		DrainLimit: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tables := Tables([]Row{*res})
	bench.WriteTables(&buf, tables)
	t.Log("\n" + buf.String())
	if res.Load.Rows[0].Sent != count || res.Written != count {
		t.Fatalf("sent %d, written %d; want %d each", res.Load.Rows[0].Sent, res.Written, count)
	}
	if res.Produced != res.Written {
		t.Errorf("produced %d of %d written: the run stopped before the forwarder drained", res.Produced, res.Written)
	}
	if res.RecordsPerS <= 0 || res.ForwardS <= 0 || len(res.Samples) < 5 {
		t.Errorf("no rate measured: %.0f records/s over %.2fs, %d samples", res.RecordsPerS, res.ForwardS, len(res.Samples))
	}
	if res.Baseline == nil || res.BaseCPUNs <= 0 || res.AggCPUNs <= 0 {
		t.Errorf("CPU figures missing: agg %.0f base %.0f", res.AggCPUNs, res.BaseCPUNs)
	}
	if res.AckP99S <= 0 || res.AckP99S < res.AckP50S {
		t.Errorf("ack latency p50 %v p99 %v: histogram not read", res.AckP50S, res.AckP99S)
	}
	if len(tables) != 2 || len(tables[1].Table.Rows) != 1 || tables[1].Table.Rows[0][3] != strconv.FormatInt(res.Produced, 10) {
		t.Errorf("want the load's table and one forwarder line with produced=%d:\n%s", res.Produced, buf.String())
	}
}

// BenchmarkForwardKafka measures forwarding to the real broker in
// LOGAGG_KAFKA_BROKERS at the target load: 200k records/s of 200 B
// (4 unix stream producers × 50k/s) for 10 s. Recipe:
//
//	LOGAGG_KAFKA_BROKERS=$(scripts/kafka.sh start | tail -1) \
//	  go test -run '^$' -bench ForwardKafka -benchtime 1x ./internal/bench/forwardbench
//
// LOGAGG_FWD_RATE (records/s in total) and LOGAGG_FWD_DURATION override
// the load.
func BenchmarkForwardKafka(b *testing.B) {
	brokers := os.Getenv("LOGAGG_KAFKA_BROKERS")
	if brokers == "" {
		b.Skip("LOGAGG_KAFKA_BROKERS not set: start a broker with scripts/kafka.sh start")
	}
	rate, dur := 200000, 10*time.Second
	if v := os.Getenv("LOGAGG_FWD_RATE"); v != "" {
		if n, err := parseInt(v); err == nil {
			rate = n
		}
	}
	if v := os.Getenv("LOGAGG_FWD_DURATION"); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			dur = d
		}
	}
	const producers = 4
	for i := 0; i < b.N; i++ {
		res, err := Measure(context.Background(), Spec{
			Spec: throughput.Spec{
				AggregatorBin: testenv.Binary(b, "aggregator"),
				ProducerBin:   testenv.Binary(b, "producer"),
				Dir:           testenv.ShortTempDir(b),
				Transports:    []string{"unixsock"},
				Producers:     producers,
				Size:          200,
				Rate:          rate / producers,
				Duration:      dur,
			},
			Brokers:  strings.Split(brokers, ","),
			Baseline: true,
		})
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		bench.WriteTables(&buf, Tables([]Row{*res}))
		b.Log("\n" + buf.String())
		b.ReportMetric(res.RecordsPerS, "fwd_records/s")
		b.ReportMetric(res.MaxLagRecords, "max_lag_records")
		b.ReportMetric(res.DrainS, "drain_s")
		b.ReportMetric(res.AggCPUNs, "agg_cpu_ns/record")
		b.ReportMetric(res.FwdCPUNs, "fwd_cpu_ns/record")
	}
}

func parseInt(s string) (int, error) {
	var n int
	_, err := fmt.Sscan(s, &n)
	return n, err
}

func validOptions() Options {
	return Options{AggregatorBin: "/bin/aggregator", ProducerBin: "/bin/producer", Brokers: []string{"127.0.0.1:9092"},
		Transports: []string{"unixsock"}, Sizes: []int{200}, Producers: []int{1, 4}, Duration: time.Second}
}

// Validate names the field that is wrong, and Run refuses such options
// before it starts anything.
func TestOptionsValidate(t *testing.T) {
	ok := validOptions()
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, c := range []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"no brokers", func(o *Options) { o.Brokers = nil }, "brokers"},
		{"empty broker", func(o *Options) { o.Brokers = []string{"127.0.0.1:9092", ""} }, `broker ""`},
		{"broker without port", func(o *Options) { o.Brokers = []string{"localhost"} }, `broker "localhost"`},
		{"no binaries", func(o *Options) { o.ProducerBin = "" }, "binaries"},
		{"no transports", func(o *Options) { o.Transports = nil }, "transports"},
		{"no sizes", func(o *Options) { o.Sizes = nil }, "sizes"},
		{"zero size", func(o *Options) { o.Sizes = []int{100, 0} }, "size 0"},
		{"no producers", func(o *Options) { o.Producers = nil }, "producers"},
		{"zero producers", func(o *Options) { o.Producers = []int{0} }, "producers 0"},
		{"no duration", func(o *Options) { o.Duration = 0 }, "duration"},
		{"negative rate", func(o *Options) { o.Rate = -1 }, "rate -1"},
	} {
		o := validOptions()
		c.mutate(&o)
		err := o.Validate()
		if !errors.Is(err, ErrBadOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadOptions naming %s", c.name, err, c.want)
		}
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("%s: Run: %v, want ErrBadOptions", c.name, err)
		}
	}
}

func TestMeasureRefusesADaemon(t *testing.T) {
	_, err := Measure(context.Background(), Spec{Spec: throughput.Spec{Daemon: &harness.AggregatorDaemon{}}, Brokers: []string{"h:1"}})
	if !errors.Is(err, ErrBadOptions) {
		t.Fatalf("a Spec with its own Daemon: %v, want ErrBadOptions", err)
	}
	if _, err := Measure(context.Background(), Spec{}); !errors.Is(err, ErrBadOptions) {
		t.Fatalf("a Spec without brokers: %v, want ErrBadOptions", err)
	}
}

// The forwarder's table has one line per load, and "-" where a figure is
// unknown: no baseline run, no acknowledgement latency.
func TestTables(t *testing.T) {
	load := func(size, prods int) *throughput.Measurement {
		return &throughput.Measurement{Rows: []throughput.Row{{Transport: "unixsock", Producers: prods, Size: size, Sent: 10, Written: 10}}}
	}
	rows := []Row{
		{Load: load(200, 1), Baseline: load(200, 1), Written: 10, Produced: 10, AckP50S: 0.0021, AckP99S: 1.5, AggCPUNs: 900, BaseCPUNs: 700, FwdCPUNs: 200},
		{Load: load(4096, 4), Written: 10, Produced: 9},
	}
	ts := Tables(rows)
	if len(ts) != 2 || len(ts[0].Table.Rows) != 2 || len(ts[1].Table.Rows) != 2 {
		t.Fatalf("want the load table and the forwarder's, two lines each: %+v", ts)
	}
	fwd := ts[1].Table
	col := func(name string) int {
		for i, h := range fwd.Header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %q in %q", name, fwd.Header)
		return -1
	}
	for _, c := range []struct {
		row       int
		col, want string
	}{
		{0, "size", "200"}, {0, "prods", "1"}, {0, "ack p50", "2.1ms"}, {0, "ack p99", "1.5s"}, {0, "no-fwd ns/rec", "700"}, {0, "fwd ns/rec", "200"},
		{1, "size", "4KiB"}, {1, "prods", "4"}, {1, "produced", "9"}, {1, "ack p50", "-"}, {1, "no-fwd ns/rec", "-"}, {1, "fwd ns/rec", "-"},
	} {
		if got := fwd.Rows[c.row][col(c.col)]; got != c.want {
			t.Errorf("row %d %s = %q, want %q", c.row, c.col, got, c.want)
		}
	}
}
