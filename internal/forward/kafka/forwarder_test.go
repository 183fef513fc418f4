package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// envBrokers names a real broker (scripts/kafka.sh start) to run the same
// tests against, besides the in-process kfake cluster.
const envBrokers = "LOGAGG_KAFKA_BROKERS"

// eachCluster runs fn against kfake and, when LOGAGG_KAFKA_BROKERS is set,
// against that real cluster. In CI the real one is mandatory.
func eachCluster(t *testing.T, fn func(t *testing.T, brokers []string)) {
	t.Run("kfake", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		fn(t, c.ListenAddrs())
	})
	t.Run("broker", func(t *testing.T) {
		b := os.Getenv(envBrokers)
		if b == "" {
			testenv.SkipOrFail(t, envBrokers+" not set; start a broker with scripts/kafka.sh start and export it")
		}
		fn(t, strings.Split(b, ","))
	})
}

var topicN atomic.Int64

// newTopic creates a unique topic with partitions partitions.
func newTopic(t testing.TB, brokers []string, partitions int32) string {
	t.Helper()
	topic := fmt.Sprintf("logagg-test-%d-%d", time.Now().UnixNano(), topicN.Add(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.MetadataMinAge(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = partitions
	rt.ReplicationFactor = -1 // the broker's default.replication.factor
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 20000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	return topic
}

// testLog plays the aggregator's writer: stamped JSON lines of about size
// bytes, rotated by renaming.
type testLog struct {
	t       testing.TB
	output  string
	seq     uint64
	f       *os.File
	size    int64 // of the active segment
	written int64 // in all segments
	next    map[string]uint64
	pad     string
}

func newTestLog(t testing.TB, lineSize int) *testLog {
	out := filepath.Join(t.TempDir(), "aggregated_logs.jsonl")
	l := &testLog{t: t, output: out, seq: 1, next: map[string]uint64{}}
	l.open()
	// sized so that a whole line is about lineSize bytes
	l.pad = strings.Repeat("x", max(1, lineSize-150))
	return l
}

func (l *testLog) open() {
	f, err := os.OpenFile(l.output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		l.t.Fatal(err)
	}
	l.f, l.size = f, 0
}

func (l *testLog) write(producer string, n int) {
	var b []byte
	for i := 0; i < n; i++ {
		now := time.Now().UnixNano()
		b = append(b, '{')
		b = seqstamp.AppendJSONFields(b, seqstamp.Stamp{Producer: producer, Seq: l.next[producer], SentNS: now})
		b = fmt.Appendf(b, `,"source":"src-%s","message":"%s","agg":{"recv_ns":%d,"transport":"test"}}`+"\n", producer, l.pad, now)
		l.next[producer]++
	}
	if _, err := l.f.Write(b); err != nil {
		l.t.Fatal(err)
	}
	l.size += int64(len(b))
	l.written += int64(len(b))
}

func (l *testLog) rotate() {
	if err := os.Rename(l.output, segment.RotatedName(l.output, l.seq)); err != nil {
		l.t.Fatal(err)
	}
	l.f.Close()
	l.seq++
	l.open()
}

func (l *testLog) end() segment.Position { return segment.Position{Seq: l.seq, Offset: l.size} }

func (l *testLog) total() (n uint64) {
	for _, v := range l.next {
		n += v
	}
	return n
}

func testConfig(brokers []string, topic, from string) Config {
	return Config{
		Brokers:            brokers,
		Topic:              topic,
		From:               from,
		Key:                KeyProducer,
		CheckpointInterval: 20 * time.Millisecond,
		Poll:               2 * time.Millisecond,
		Linger:             time.Millisecond,
		ClientOpts:         []kgo.Opt{kgo.MetadataMinAge(250 * time.Millisecond)},
	}
}

// running is a Forwarder whose Run is in a goroutine.
type running struct {
	f    *Forwarder
	stop context.CancelFunc
	done chan error
	once sync.Once
}

func start(t *testing.T, cfg Config, reg prometheus.Registerer) *running {
	t.Helper()
	f, err := New(cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{f: f, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- f.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

func (r *running) shutdown(t *testing.T) {
	r.once.Do(func() {
		r.stop()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return 30 s after cancel")
		}
	})
}

// waitCheckpoint polls until the durable checkpoint reaches want.
func waitCheckpoint(t *testing.T, f *Forwarder, want segment.Position) {
	t.Helper()
	testenv.Poll(t, 45*time.Second, fmt.Sprintf("the checkpoint to reach %v", want), func() (string, bool) {
		ck := f.Checkpoint()
		return fmt.Sprintf("checkpoint %v; stats %+v", ck, f.Stats()), !ck.Less(want)
	})
	if got := f.Checkpoint(); got != want {
		t.Fatalf("checkpoint %v beyond the end of the log %v", got, want)
	}
}

// consumeAll reads the topic until it holds want records (or a deadline)
// and returns how many times each (producer, seq) arrived.
func consumeAll(t *testing.T, brokers []string, topic string, want uint64) map[seqstamp.Stamp]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[seqstamp.Stamp]int{}
	var n uint64
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for n < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records", n, want)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			s, ok := seqstamp.Find(r.Value)
			if !ok {
				t.Errorf("record without stamp: %q", r.Value)
				return
			}
			if string(r.Key) != s.Producer {
				t.Errorf("record key %q, want producer %q", r.Key, s.Producer)
			}
			s.SentNS = 0
			got[s]++
			n++
		})
	}
	return got
}

// verify checks that every record the log holds arrived, and returns the
// number of duplicates.
func verify(t *testing.T, got map[seqstamp.Stamp]int, l *testLog) (dups int) {
	t.Helper()
	missing := 0
	for p, n := range l.next {
		for s := uint64(0); s < n; s++ {
			c := got[seqstamp.Stamp{Producer: p, Seq: s}]
			if c == 0 {
				missing++
				if missing < 10 {
					t.Errorf("missing %s seq %d", p, s)
				}
			}
			dups += max(0, c-1)
		}
	}
	if missing > 0 {
		t.Fatalf("%d records missing in Kafka", missing)
	}
	return dups
}

func TestForwardAcrossRotation(t *testing.T) {
	eachCluster(t, func(t *testing.T, brokers []string) {
		topic := newTopic(t, brokers, 3)
		l := newTestLog(t, 200)
		reg := prometheus.NewPedanticRegistry()
		r := start(t, testConfig(brokers, topic, l.output), reg)

		for round := 0; round < 4; round++ {
			for p := 0; p < 3; p++ {
				l.write(fmt.Sprintf("p%d", p), 300)
			}
			if round < 3 {
				l.rotate()
			}
		}
		waitCheckpoint(t, r.f, l.end())
		// Everything before the active segment may go; the active may not.
		for s := uint64(1); s < l.seq; s++ {
			if !r.f.MayDelete(s) {
				t.Errorf("MayDelete(%d) = false after it was shipped", s)
			}
		}
		if r.f.MayDelete(l.seq) {
			t.Errorf("MayDelete(active %d) = true", l.seq)
		}
		got := consumeAll(t, brokers, topic, l.total())
		if dups := verify(t, got, l); dups != 0 {
			t.Errorf("%d duplicates without any failure", dups)
		}
		st := r.f.Stats()
		if st.Produced != l.total() || st.InFlight != 0 {
			t.Errorf("stats %+v, want %d produced, 0 in flight", st, l.total())
		}
		if n := testutil.CollectAndCount(reg, "logagg_forward_kafka_ack_latency_seconds"); n != 1 {
			t.Errorf("ack latency histogram missing (%d)", n)
		}
		if v := testutil.ToFloat64(r.f.m.produced); uint64(v) != l.total() {
			t.Errorf("records_produced_total = %v, want %d", v, l.total())
		}
		if c := histCount(t, reg, "logagg_forward_kafka_ack_latency_seconds"); c != l.total() {
			t.Errorf("ack latency observed %d records, want every stamped one (%d)", c, l.total())
		}
		// lag gauges drain to zero once the checkpoint loop has run
		testenv.Poll(t, 10*time.Second, "the lag to drain", func() (string, bool) {
			b, n := gauge(t, reg, "logagg_forward_kafka_lag_bytes"), gauge(t, reg, "logagg_forward_kafka_lag_records")
			return fmt.Sprintf("%v bytes, %v records", b, n), b == 0 && n == 0
		})
	})
}

// metric is the (first) sample of the metric named name in g.
func metric(t *testing.T, g prometheus.Gatherer, name string) *dto.Metric {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}

func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	return metric(t, g, name).GetGauge().GetValue()
}

func histCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	return metric(t, g, name).GetHistogram().GetSampleCount()
}

// TestRestartResumesFromCheckpoint stops a forwarder, rewinds its durable
// checkpoint as a crash between two checkpoint saves would have left it, and
// restarts: nothing may be missing, and the duplicates must be exactly the
// records after the rewound checkpoint.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	eachCluster(t, func(t *testing.T, brokers []string) {
		topic := newTopic(t, brokers, 2)
		l := newTestLog(t, 200)
		cfg := testConfig(brokers, topic, l.output)

		l.write("a", 500)
		l.write("b", 500)
		crashAt := l.end() // the checkpoint a crash would have left
		l.write("a", 250)
		l.rotate()
		l.write("b", 250)
		first := start(t, cfg, nil)
		waitCheckpoint(t, first.f, l.end())
		first.shutdown(t)
		sentAfterCrashPoint := 500

		if err := segment.SaveCheckpoint(cfg.withDefaults().CheckpointPath, crashAt); err != nil {
			t.Fatal(err)
		}
		l.write("a", 300)
		l.rotate()
		l.write("b", 300)
		second := start(t, cfg, nil)
		if got := second.f.Checkpoint(); got != crashAt {
			t.Fatalf("restarted at %v, want the checkpoint %v", got, crashAt)
		}
		waitCheckpoint(t, second.f, l.end())

		got := consumeAll(t, brokers, topic, l.total()+uint64(sentAfterCrashPoint))
		dups := verify(t, got, l)
		t.Logf("%d records, %d duplicates after a restart from a checkpoint %d records old", l.total(), dups, sentAfterCrashPoint)
		if dups != sentAfterCrashPoint {
			t.Fatalf("%d duplicates, want exactly the %d records after the checkpoint", dups, sentAfterCrashPoint)
		}
	})
}

// TestUnreachableKeepsCheckpoint points the forwarder at a port nobody
// listens on: nothing may be checkpointed, the lag must show, and segments
// must not become deletable.
func TestUnreachableKeepsCheckpoint(t *testing.T) {
	l := newTestLog(t, 200)
	l.write("a", 100)
	l.rotate()
	l.write("a", 100)
	cfg := testConfig([]string{"127.0.0.1:1"}, "t", l.output)
	cfg.DrainTimeout = 100 * time.Millisecond
	reg := prometheus.NewPedanticRegistry()
	r := start(t, cfg, reg)
	testenv.Poll(t, 10*time.Second, "the lag to show", func() (string, bool) {
		st, lag := r.f.Stats(), gauge(t, reg, "logagg_forward_kafka_lag_bytes")
		return fmt.Sprintf("%+v lag_bytes %v", st, lag), st.InFlight == 200 && lag != 0
	})
	if got := gauge(t, reg, "logagg_forward_kafka_lag_bytes"); int64(got) != l.written {
		t.Errorf("lag_bytes %v, want the whole log %d", got, l.written)
	}
	if r.f.MayDelete(1) {
		t.Error("segment 1 deletable though nothing was acknowledged")
	}
	r.shutdown(t)
	// The only checkpoint allowed is the start of the log.
	start := segment.Position{Seq: 1}
	if st := r.f.Stats(); start.Less(st.Checkpoint) || st.Produced != 0 {
		t.Fatalf("checkpoint moved without Kafka: %+v", st)
	}
	if pos, _, err := segment.LoadCheckpoint(cfg.withDefaults().CheckpointPath); err != nil || start.Less(pos) {
		t.Fatalf("checkpoint on disk %v, %v: moved without Kafka", pos, err)
	}
}

func TestValidateNamesTheField(t *testing.T) {
	ok := Config{Brokers: []string{"127.0.0.1:9092"}, Topic: "logs", From: "/var/log/x.jsonl"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, mut := range map[string]func(*Config){
		"brokers":         func(c *Config) { c.Brokers = nil },
		"brokers ":        func(c *Config) { c.Brokers = []string{"nohostport"} },
		"topic":           func(c *Config) { c.Topic = "" },
		"topic ":          func(c *Config) { c.Topic = "bad topic!" },
		"key":             func(c *Config) { c.Key = "pid" },
		"compression":     func(c *Config) { c.Compression = "brotli" },
		"batch_max_bytes": func(c *Config) { c.BatchMaxBytes = 10 },
		"linger":          func(c *Config) { c.Linger = -time.Second },
		"max_in_flight":   func(c *Config) { c.MaxInFlight = -1 },
		"from":            func(c *Config) { c.From = "" },
		"tls.cert_file":   func(c *Config) { c.TLS.CertFile = "c.pem" },
		"sasl.mechanism":  func(c *Config) { c.SASL.Mechanism = "gssapi" },
		"sasl.user":       func(c *Config) { c.SASL.Mechanism = "scram-sha-512" },
		"sasl.mechanism ": func(c *Config) { c.SASL.User = "u" },
	} {
		c := ok
		c.Brokers = append([]string(nil), ok.Brokers...)
		mut(&c)
		err := c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), ": "+strings.TrimSpace(field)+":") {
			t.Errorf("%s: Validate = %v, want an ErrConfig naming the field", field, err)
		}
	}
	if _, err := New(Config{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New(empty) = %v", err)
	}
}

func TestKeyAndFieldExtraction(t *testing.T) {
	var fields [numLineFields]record.Value
	// A nested "source" and a "recv_ns" inside the message are not ours.
	line := []byte(`{"ctx":{"source":"nested"},"message":"\"recv_ns\":5","source":"we\"b","agg":{"recv_ns":1763845678123456789,"transport":"unix"}}`)
	lineFields.Find(line, fields[:])
	if got := string(fields[fieldSource].Raw); got != `"we\"b"` {
		t.Errorf("source = %s", got)
	}
	if got, _ := fields[fieldRecvNS].Int(); got != 1763845678123456789 {
		t.Errorf("recv_ns = %d", got)
	}
	lineFields.Find([]byte(`{"message":"x","agg":{"recv_ns":`), fields[:])
	if fields[fieldSource].Kind != record.KindMissing || fields[fieldRecvNS].Kind != record.KindMissing {
		t.Errorf("fields from a truncated line without them: %+v", fields)
	}
}
