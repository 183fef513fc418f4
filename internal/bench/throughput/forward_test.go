package throughput

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/testenv"
)

// RunForward against an in-process kfake cluster (the aggregator child
// process dials its TCP port): the accounting must show every written
// record acknowledged, a rate, samples, and both CPU figures.
func TestRunForwardKfake(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const count = 3000
	res, err := RunForward(context.Background(), ForwardSpec{
		Spec: Spec{
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
	tables := ForwardTables([]*ForwardResult{res})
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
//	  go test -run '^$' -bench ForwardKafka -benchtime 1x ./internal/bench/throughput
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
		res, err := RunForward(context.Background(), ForwardSpec{
			Spec: Spec{
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
		bench.WriteTables(&buf, ForwardTables([]*ForwardResult{res}))
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
