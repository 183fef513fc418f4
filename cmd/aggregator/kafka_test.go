package main

// Kafka forwarding, end to end: real producer processes → real aggregator
// binary → real Kafka broker(s), checked with a consumer that accounts for
// every producer sequence number. The failure tests stop, kill and start
// brokers, so they run their OWN brokers (scripts/kafka.sh with a private
// --dir and --port) and leave the shared one (LOGAGG_KAFKA_BROKERS) alone.
//
// The `aggregator forward` tests call forwardMain in-process against
// franz-go's kfake, so they run everywhere.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ipclab/logagg/internal/segment"
	"github.com/ipclab/logagg/internal/seqstamp"
	"github.com/ipclab/logagg/internal/testenv"
)

// ---------------------------------------------------------------- helpers

// sharedBrokers is the broker scripts/test.sh started, or a skip (a
// failure in CI).
func sharedBrokers(t *testing.T) []string {
	t.Helper()
	b := os.Getenv("LOGAGG_KAFKA_BROKERS")
	if b == "" {
		testenv.SkipOrFail(t, "LOGAGG_KAFKA_BROKERS is not set: start a broker with scripts/kafka.sh start (scripts/test.sh does)")
	}
	return strings.Split(b, ",")
}

// requireKafkaScript skips (fails in CI) unless scripts/kafka.sh can start
// brokers here: java and either the cached jars or mvn to fetch them.
func requireKafkaScript(t *testing.T) {
	t.Helper()
	sharedBrokers(t) // the same environment that gives a shared broker can start more
	testenv.RequireCommand(t, "java")
}

var topicSeq atomic.Int64

func uniqueTopic(name string) string {
	return fmt.Sprintf("logagg-%s-%d-%d", name, time.Now().UnixNano(), topicSeq.Add(1))
}

// createTopic creates topic with the broker's default replication factor.
func createTopic(t *testing.T, brokers []string, topic string, partitions int32) {
	t.Helper()
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
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 20000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
}

// kafkaCluster is a broker set of our own, run by scripts/kafka.sh.
type kafkaCluster struct {
	t       *testing.T
	dir     string
	port    int
	brokers int
	boot    []string
}

// newKafkaCluster reserves a directory and ports for brokers (1 or 3)
// without starting them; stop --kill runs at cleanup. The ports are
// kafka.sh's reservation for the directory: no other test run's brokers
// take them, and they lie outside the kernel's ephemeral range, so no
// socket bound to port 0 and no outgoing connection gets them before the
// broker starts, however late that is.
func newKafkaCluster(t *testing.T, brokers int) *kafkaCluster {
	t.Helper()
	requireKafkaScript(t)
	c := &kafkaCluster{t: t, dir: t.TempDir(), brokers: brokers}
	t.Cleanup(func() { c.script("stop", "--kill") })
	out, err := c.script("reserve", "--brokers", strconv.Itoa(brokers))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	c.boot = strings.Split(lines[len(lines)-1], ",")
	_, port, _ := strings.Cut(c.boot[0], ":")
	if c.port, err = strconv.Atoi(port); err != nil || len(c.boot) != brokers {
		t.Fatalf("kafka.sh reserve printed %q", out)
	}
	return c
}

func (c *kafkaCluster) script(args ...string) (string, error) {
	args = append(args, "--dir", c.dir)
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(c.t), "scripts", "kafka.sh"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "LOGAGG_KAFKA_HEAP=-Xms64m -Xmx384m")
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("kafka.sh %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// start starts every node (or one, with node > 0) and waits until ready.
func (c *kafkaCluster) start(node int) {
	c.t.Helper()
	args := []string{"start", "--port", strconv.Itoa(c.port), "--brokers", strconv.Itoa(c.brokers)}
	if node > 0 {
		args = append(args, "--node", strconv.Itoa(node))
	}
	begin := time.Now()
	if _, err := c.script(args...); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("kafka.sh start %v: %.1fs", args[1:], time.Since(begin).Seconds())
}

// stop stops every node (or one); kill uses SIGKILL.
func (c *kafkaCluster) stop(node int, kill bool) {
	c.t.Helper()
	args := []string{"stop"}
	if node > 0 {
		args = append(args, "--node", strconv.Itoa(node))
	}
	if kill {
		args = append(args, "--kill")
	}
	if _, err := c.script(args...); err != nil {
		c.t.Fatal(err)
	}
}

// producerProc is a real producer process writing seq-stamped records.
type producerProc struct {
	id     string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func startProducer(t *testing.T, url, id string, size, rate, count int) *producerProc {
	t.Helper()
	p := &producerProc{id: id, done: make(chan struct{})}
	p.cmd = exec.Command(testenv.Binary(t, "producer"), "unixsock", strconv.Itoa(size), "--addr", url,
		"--rate", strconv.Itoa(rate), "--count", strconv.Itoa(count), "--seq", "--id", id, "--json-summary")
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *producerProc) finished() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the producer to exit 0 and returns its sent count.
func (p *producerProc) wait(t *testing.T, limit time.Duration) int64 {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("producer %s did not finish within %v\n%s", p.id, limit, p.stderr.String())
	}
	if p.err != nil {
		t.Fatalf("producer %s: %v\n%s", p.id, p.err, p.stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(p.stderr.String()), "\n")
	var s struct {
		Sent   int64 `json:"sent"`
		Failed int64 `json:"failed"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
		t.Fatalf("producer %s summary: %v\n%s", p.id, err, p.stderr.String())
	}
	return s.Sent
}

type stampKey struct {
	producer string
	seq      uint64
}

// localStamps returns the stamps of every complete line of the segment log
// at output (rotated segments and the active file), with counts.
func localStamps(t *testing.T, output string) map[stampKey]int {
	t.Helper()
	seqs, err := segment.ListRotated(output)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{}
	for _, s := range seqs {
		files = append(files, segment.RotatedName(output, s))
	}
	files = append(files, output)
	out := map[stampKey]int{}
	for _, f := range files {
		fh, err := os.Open(f)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReaderSize(fh, 1<<20)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				break // EOF, or a partial last line still being written
			}
			if st, ok := seqstamp.Find(line); ok {
				out[stampKey{st.Producer, st.Seq}]++
			}
		}
		fh.Close()
	}
	return out
}

// consumed is what a consumer found in a topic.
type consumed struct {
	counts  map[stampKey]int
	records int
}

// consumeUntil reads topic from the start until every key of want has been
// seen and nothing new arrived for a second, or limit passes.
func consumeUntil(t *testing.T, brokers []string, topic string, want map[stampKey]int, limit time.Duration) consumed {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMinAge(250*time.Millisecond),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := consumed{counts: map[stampKey]int{}}
	missing := len(want)
	quietSince := time.Now()
	testenv.Until(limit, func() (struct{}, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			got.records++
			st, ok := seqstamp.Find(r.Value)
			if !ok {
				return
			}
			k := stampKey{st.Producer, st.Seq}
			if got.counts[k] == 0 && want[k] > 0 {
				missing--
			}
			got.counts[k]++
		})
		if n > 0 {
			quietSince = time.Now()
		}
		return struct{}{}, missing == 0 && time.Since(quietSince) > time.Second
	})
	return got
}

// checkDelivered asserts that every locally written record is in Kafka at
// least once and nothing unknown is; it logs and returns the duplicates.
func checkDelivered(t *testing.T, local map[stampKey]int, got consumed) int {
	t.Helper()
	var missing []stampKey
	for k := range local {
		if got.counts[k] == 0 {
			missing = append(missing, k)
		}
	}
	dups, extra := 0, 0
	for k, n := range got.counts {
		if local[k] == 0 {
			extra++
			continue
		}
		// A record the writer duplicated locally (none expected) is not
		// the forwarder's duplicate.
		if n > local[k] {
			dups += n - local[k]
		}
	}
	t.Logf("kafka: %d records consumed for %d written locally: %d duplicates, %d missing, %d unknown",
		got.records, len(local), dups, len(missing), extra)
	if len(missing) > 0 {
		show := missing
		if len(show) > 10 {
			show = show[:10]
		}
		t.Errorf("%d records written locally never reached Kafka, e.g. %v", len(missing), show)
	}
	if extra > 0 {
		t.Errorf("%d records in Kafka were never in the local log", extra)
	}
	return dups
}

// checkContiguous asserts that each producer's stamps on disk form one
// run from its first seq: nothing was deleted or skipped.
func checkContiguous(t *testing.T, local map[stampKey]int, sent map[string]int64) {
	t.Helper()
	type span struct{ min, max, n uint64 }
	spans := map[string]*span{}
	for k := range local {
		s := spans[k.producer]
		if s == nil {
			s = &span{min: k.seq, max: k.seq}
			spans[k.producer] = s
		}
		s.min, s.max = min(s.min, k.seq), max(s.max, k.seq)
		s.n++
	}
	for id := range sent {
		s := spans[id]
		if s == nil {
			t.Errorf("producer %s: nothing on disk", id)
			continue
		}
		if s.min > 1 || s.max-s.min+1 != s.n {
			t.Errorf("producer %s: seqs %d..%d on disk but only %d distinct: a gap (deleted data)", id, s.min, s.max, s.n)
		}
	}
}

// waitLagZero polls the aggregator's forwarder gauges until both lags are
// 0 and at least want records have been produced in this process.
func waitLagZero(t *testing.T, a *aggProc, want float64, limit time.Duration) {
	t.Helper()
	last, ok := testenv.Until(limit, func() ([3]float64, bool) {
		lr := a.metric("logagg_forward_kafka_lag_records")
		lb := a.metric("logagg_forward_kafka_lag_bytes")
		pr := a.metric("logagg_forward_kafka_records_produced_total")
		return [3]float64{lr, lb, pr}, lr == 0 && lb == 0 && pr >= want
	})
	if !ok {
		t.Fatalf("forwarder lag did not drain within %v: lag_records %v lag_bytes %v produced %v\n%s", limit, last[0], last[1], last[2], a.log())
	}
}

func kafkaArgs(sock string, brokers []string, topic string, extra ...string) []string {
	return append([]string{"--listen", "unix://" + sock, "--forward-kafka", strings.Join(brokers, ","),
		"--kafka-topic", topic, "--drain-timeout", "5s"}, extra...)
}

// ------------------------------------------------- failure tests (issue 6)

// a. The broker goes away for ~10 s mid-stream: lag grows, then drains to
// 0 once it is back, and nothing written locally is missing in Kafka.
func TestKafkaBrokerOutage(t *testing.T) {
	kc := newKafkaCluster(t, 1)
	kc.start(0)
	topic := uniqueTopic("outage")
	createTopic(t, kc.boot, topic, 1)

	dir := testenv.ShortTempDir(t)
	a := startAgg(t, dir, kafkaArgs(filepath.Join(dir, "s"), kc.boot, topic)...)
	const rate, count = 2000, 36000 // 18 s of records
	p := startProducer(t, a.url("unix"), "outage", 200, rate, count)

	if v := a.waitMetric(2000, "logagg_forward_kafka_records_produced_total"); v < 2000 {
		t.Fatalf("forwarding did not start: produced %v\n%s", v, a.log())
	}
	kc.stop(0, false)
	down := time.Now()
	producedAtStop := a.metric("logagg_forward_kafka_records_produced_total")
	var maxLag float64
	// Not a wait: the outage lasts 10 s (the scenario), sampled every 200 ms.
	for time.Since(down) < 10*time.Second {
		maxLag = max(maxLag, a.metric("logagg_forward_kafka_lag_records"))
		time.Sleep(200 * time.Millisecond)
	}
	producedDown := a.metric("logagg_forward_kafka_records_produced_total") - producedAtStop
	t.Logf("broker down 10s: max lag_records %.0f, produced meanwhile %.0f", maxLag, producedDown)
	// Records keep arriving at 2000/s and cannot be acknowledged: the
	// in-flight count must have grown well past one poll's worth.
	if maxLag < 2000 {
		t.Errorf("lag_records peaked at %.0f while the broker was down; want it to grow (>= 2000)", maxLag)
	}
	kc.start(0)

	sent := p.wait(t, 60*time.Second)
	if sent != count {
		t.Errorf("producer sent %d, want %d", sent, count)
	}
	waitLagZero(t, a, 1, 60*time.Second)
	local := localStamps(t, a.output)
	if len(local) != count {
		t.Errorf("%d distinct records on disk, producer sent %d", len(local), count)
	}
	got := consumeUntil(t, kc.boot, topic, local, 60*time.Second)
	checkDelivered(t, local, got)
	a.stop(syscall.SIGTERM)
}

// b. SIGKILL the aggregator mid-stream and start it again on the same
// output and checkpoint: everything written locally arrives at least once;
// the duplicates (records acknowledged after the last checkpoint) are
// counted and reported.
func TestKafkaAggregatorKilled(t *testing.T) {
	brokers := sharedBrokers(t)
	topic := uniqueTopic("sigkill")
	createTopic(t, brokers, topic, 1)

	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "s")
	args := kafkaArgs(sock, brokers, topic)
	a := startAgg(t, dir, args...)
	const count = 24000
	p := startProducer(t, a.url("unix"), "killed", 200, 4000, count) // ~6 s

	if v := a.waitMetric(4000, "logagg_forward_kafka_records_produced_total"); v < 4000 {
		t.Fatalf("forwarding did not start: produced %v\n%s", v, a.log())
	}
	// The checkpoint is saved every second (checkpoint_interval): 4000
	// records can be acknowledged before the first save. Kill once it is.
	ckPath := segment.CheckpointPath(a.output, "kafka")
	testenv.Eventually(t, 10*time.Second, "the forwarder's first checkpoint", func() bool {
		_, found, err := segment.LoadCheckpoint(ckPath)
		return err == nil && found
	})
	a.proc.Kill()
	ck, found, err := segment.LoadCheckpoint(ckPath)
	if err != nil || !found {
		t.Fatalf("no checkpoint after %v records were acknowledged: found %v err %v", 4000, found, err)
	}
	t.Logf("killed with checkpoint %v", ck)

	// Same directory: same output, same checkpoint, same socket path
	// (the producer redials it).
	b := startAgg(t, dir, args...)
	p.wait(t, 60*time.Second)
	waitLagZero(t, b, 1, 60*time.Second)
	local := localStamps(t, b.output)
	if len(local) < count/2 {
		t.Fatalf("only %d records on disk of %d sent", len(local), count)
	}
	got := consumeUntil(t, brokers, topic, local, 60*time.Second)
	dups := checkDelivered(t, local, got)
	t.Logf("duplicates after SIGKILL and restart: %d (re-sent from checkpoint %v)", dups, ck)
	b.stop(syscall.SIGTERM)
}

// c. Kafka unreachable from the start and a small --max-disk: the writer
// holds producers back instead of deleting unsent segments; once a broker
// appears on that port everything drains and nothing is missing.
func TestKafkaUnreachableDiskCap(t *testing.T) {
	kc := newKafkaCluster(t, 1) // reserved, started later
	topic := uniqueTopic("diskcap")
	dir := testenv.ShortTempDir(t)
	a := startAgg(t, dir, kafkaArgs(filepath.Join(dir, "s"), kc.boot, topic,
		"--max-size", "64KiB", "--max-disk", "256KiB",
		// Small buffers in front of the writer, so that the backlog sits on
		// disk (and in the producer) rather than in the aggregator's memory.
		"--queue-batches", "2", "--batch-bytes", "16KiB", "--rcvbuf", "4KiB")...)
	// ~2 MB of lines: eight times the cap, more than the socket buffers
	// and queue hold.
	const count = 6000
	p := startProducer(t, a.url("unix"), "capped", 200, 0, count)

	if v := a.waitMetric(1, "logagg_disk_cap_waits_total"); v < 1 {
		t.Fatalf("disk cap never reached\n%s", a.log())
	}
	// The cap holds: the producer stays blocked (a fixed --count cannot
	// finish) and nothing on disk was deleted. The second is the
	// observation window of that negative check, not a wait for an event.
	time.Sleep(time.Second)
	if p.finished() {
		t.Fatalf("producer finished while the disk cap held: records were dropped or deleted\n%s", p.stderr.String())
	}
	local := localStamps(t, a.output)
	checkContiguous(t, local, map[string]int64{"capped": 0})
	if n := len(local); n == 0 || n >= count {
		t.Fatalf("%d records on disk under the cap, want some but not all %d", n, count)
	}
	if disk := a.metric("logagg_disk_bytes"); disk > 256<<10 {
		t.Errorf("disk_bytes %v over the 256 KiB cap", disk)
	}
	t.Logf("held: %d records on disk, %v cap waits", len(local), a.metric("logagg_disk_cap_waits_total"))

	kc.start(0)
	sent := p.wait(t, 90*time.Second)
	if sent != count {
		t.Errorf("producer sent %d, want %d", sent, count)
	}
	waitLagZero(t, a, count, 60*time.Second)
	want := wantRange("capped", 1, count+1) // the client stamps seq from 1
	got := consumeUntil(t, kc.boot, topic, want, 60*time.Second)
	checkDelivered(t, want, got)
	a.stop(syscall.SIGTERM)
}

// d. Three brokers (replication factor 3, min.insync.replicas=2), two
// aggregators as two hosts sharing a topic; one broker is SIGKILLed
// mid-stream. No record is lost.
func TestKafkaThreeBrokersOneKilled(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		t.Skip("three broker JVMs: skipped with -short outside CI")
	}
	kc := newKafkaCluster(t, 3)
	kc.start(0)
	topic := uniqueTopic("cluster")
	createTopic(t, kc.boot, topic, 3)

	type host struct {
		a *aggProc
		p *producerProc
	}
	var hosts []host
	for i, id := range []string{"hostA", "hostB"} {
		dir := testenv.ShortTempDir(t)
		a := startAgg(t, dir, kafkaArgs(filepath.Join(dir, "s"), kc.boot, topic, "--kafka-key", "producer")...)
		p := startProducer(t, a.url("unix"), fmt.Sprintf("%s-%d", id, i), 200, 2000, 20000) // 10 s each
		hosts = append(hosts, host{a, p})
	}
	for _, h := range hosts {
		if v := h.a.waitMetric(2000, "logagg_forward_kafka_records_produced_total"); v < 2000 {
			t.Fatalf("forwarding did not start: produced %v\n%s", v, h.a.log())
		}
	}
	kc.stop(2, true)
	t.Logf("node 2 killed")

	local := map[stampKey]int{}
	for _, h := range hosts {
		h.p.wait(t, 60*time.Second)
		waitLagZero(t, h.a, 1, 90*time.Second)
		for k, n := range localStamps(t, h.a.output) {
			local[k] += n
		}
	}
	if len(local) != 40000 {
		t.Errorf("%d distinct records on the two hosts' disks, want 40000", len(local))
	}
	var live []string
	live = append(live, kc.boot[0], kc.boot[2])
	got := consumeUntil(t, live, topic, local, 90*time.Second)
	checkDelivered(t, local, got)
	var wg sync.WaitGroup
	for _, h := range hosts {
		wg.Add(1)
		go func(a *aggProc) { defer wg.Done(); a.signal(syscall.SIGTERM); <-a.exited() }(h.a)
	}
	wg.Wait()
}

// ------------------------------------------ aggregator forward (kfake)

// writeLog writes lines stamped id/from..to-1 to the segment log at output:
// rotated segments of per lines each, the rest in the active file, plus a
// partial last line (a writer mid-write) that must not be shipped.
func writeLog(t *testing.T, output, id string, from, to, per int, partial bool) {
	t.Helper()
	seq, err := segment.ActiveSeq(output)
	if err != nil {
		t.Fatal(err)
	}
	line := func(i int) []byte {
		b := []byte(`{`)
		b = seqstamp.AppendJSONFields(b, seqstamp.Stamp{Producer: id, Seq: uint64(i), SentNS: time.Now().UnixNano()})
		return append(b, `,"msg":"x","agg":{"recv_ns":1}}`+"\n"...)
	}
	// Drop a previous partial line first: the writer cuts torn tails.
	if b, err := os.ReadFile(output); err == nil {
		if i := bytes.LastIndexByte(b, '\n'); i+1 < len(b) {
			if err := os.WriteFile(output, b[:i+1], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f, err := os.OpenFile(output, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := from; i < to; i++ {
		f.Write(line(i))
		n++
		if per > 0 && n%per == 0 && i < to-1 {
			f.Close()
			if err := os.Rename(output, segment.RotatedName(output, seq)); err != nil {
				t.Fatal(err)
			}
			seq++
			if f, err = os.OpenFile(output, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if partial {
		f.Write([]byte(`{"producer_id":"` + id + `","seq":99999`))
	}
	f.Close()
}

func kfakeCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func wantRange(id string, from, to int) map[stampKey]int {
	w := map[stampKey]int{}
	for i := from; i < to; i++ {
		w[stampKey{id, uint64(i)}] = 1
	}
	return w
}

// syncBuffer is an io.Writer safe for the forwarder's logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// --once ships a directory's whole log (rotated segments, active file, not
// the partial last line), exits 0, and a second --once resumes from the
// checkpoint: a backfill in two steps ships every record exactly once.
func TestForwardOnceResumes(t *testing.T) {
	brokers := kfakeCluster(t)
	dir := t.TempDir()
	output := filepath.Join(dir, defaultOutputName)
	writeLog(t, output, "bf", 1, 2501, 1000, true)
	topic := uniqueTopic("once")

	var errb syncBuffer
	args := []string{"--from", dir, "--brokers", strings.Join(brokers, ","), "--topic", topic, "--once"}
	if code := forwardCommand(args, &errb); code != 0 {
		t.Fatalf("forward --once: exit %d\n%s", code, errb.String())
	}
	out := errb.String()
	if !strings.Contains(out, "shipping "+output+" from the start of the log") || !strings.Contains(out, "topic "+topic) {
		t.Errorf("start line does not say what it does:\n%s", out)
	}
	ck, found, err := segment.LoadCheckpoint(segment.CheckpointPath(output, "kafka"))
	if err != nil || !found || ck.Seq != 3 {
		t.Fatalf("checkpoint after --once: %v found %v err %v; want in segment 3 (the active file)", ck, found, err)
	}
	got := consumeUntil(t, brokers, topic, wantRange("bf", 1, 2501), 20*time.Second)
	if dups := checkDelivered(t, wantRange("bf", 1, 2501), got); dups != 0 {
		t.Errorf("%d duplicates after a clean --once", dups)
	}
	if got.records != 2500 {
		t.Errorf("%d records in Kafka, want 2500 (the partial line must not be shipped)", got.records)
	}

	// More lines (the partial one completed as a new record, plus more).
	writeLog(t, output, "bf", 2501, 3001, 0, false)
	errb = syncBuffer{}
	if code := forwardCommand(args, &errb); code != 0 {
		t.Fatalf("second forward --once: exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "from checkpoint "+ck.String()) {
		t.Errorf("second run does not report resuming from %v:\n%s", ck, errb.String())
	}
	got = consumeUntil(t, brokers, topic, wantRange("bf", 1, 3001), 20*time.Second)
	if dups := checkDelivered(t, wantRange("bf", 1, 3001), got); dups != 0 {
		t.Errorf("%d duplicates after resuming from the checkpoint", dups)
	}
}

// Without --once the command follows the log until stopped, serves its
// metrics, and stops cleanly with a checkpoint at the end.
func TestForwardFollowsUntilStopped(t *testing.T) {
	brokers := kfakeCluster(t)
	dir := t.TempDir()
	output := filepath.Join(dir, "app.jsonl")
	writeLog(t, output, "fl", 1, 101, 0, false)
	topic := uniqueTopic("follow")

	var errb syncBuffer
	stop := make(chan struct{})
	done := make(chan int, 1)
	go func() {
		done <- forwardMain([]string{"--from", output, "--forward-kafka", strings.Join(brokers, ","),
			"--kafka-topic", topic, "--metrics", "127.0.0.1:0"}, &errb, stop)
	}()
	got := consumeUntil(t, brokers, topic, wantRange("fl", 1, 101), 20*time.Second)
	checkDelivered(t, wantRange("fl", 1, 101), got)
	writeLog(t, output, "fl", 101, 301, 50, false) // with rotations while following
	got = consumeUntil(t, brokers, topic, wantRange("fl", 1, 301), 20*time.Second)
	checkDelivered(t, wantRange("fl", 1, 301), got)

	m := regexp.MustCompile(`metrics on (http://\S+)`).FindStringSubmatch(errb.String())
	if m == nil {
		t.Fatalf("no metrics address printed:\n%s", errb.String())
	}
	a := &aggProc{t: t, metrics: m[1]}
	if v := a.waitMetric(300, "logagg_forward_kafka_records_produced_total"); v < 300 {
		t.Errorf("records_produced_total %v, want 300", v)
	}
	select {
	case code := <-done:
		t.Fatalf("forward exited (%d) while following\n%s", code, errb.String())
	default:
	}
	close(stop)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after stop\n%s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("forward did not stop")
	}
	ck, found, err := segment.LoadCheckpoint(segment.CheckpointPath(output, "kafka"))
	active, _ := segment.ActiveSeq(output)
	st, _ := os.Stat(output)
	if err != nil || !found || ck != (segment.Position{Seq: active, Offset: st.Size()}) {
		t.Errorf("final checkpoint %v (found %v, err %v), want the end of the log %d:%d", ck, found, err, active, st.Size())
	}
}

func TestForwardUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no from", []string{"--brokers", "127.0.0.1:1"}, "--from is required"},
		{"missing log", []string{"--from", filepath.Join(dir, "nope.jsonl"), "--brokers", "127.0.0.1:1"}, "no such log"},
		{"no brokers", []string{"--from", dir}, "brokers"},
		{"bad key", []string{"--from", dir, "--brokers", "127.0.0.1:1", "--key", "color"}, "key"},
		{"extra arg", []string{"--from", dir, "x"}, "unexpected argument"},
		{"two destinations", []string{"--from", dir, "--brokers", "127.0.0.1:1", "--forward-otlp", "127.0.0.1:4317"}, "one destination"},
		{"bad otlp protocol", []string{"--from", dir, "--forward-otlp", "127.0.0.1:4317", "--otlp-protocol", "carrier-pigeon"}, "protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb syncBuffer
			if code := forwardCommand(tc.args, &errb); code != 2 {
				t.Errorf("exit %d, want 2\n%s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Errorf("message does not mention %q:\n%s", tc.want, errb.String())
			}
		})
	}
}

// --config takes the log and the Kafka settings from the aggregator's own
// YAML file; an explicit flag still wins (here the topic).
func TestForwardConfigFile(t *testing.T) {
	brokers := kfakeCluster(t)
	dir := t.TempDir()
	output := filepath.Join(dir, "app.jsonl")
	writeLog(t, output, "cf", 1, 51, 0, false)
	fileTopic, flagTopic := uniqueTopic("file"), uniqueTopic("flag")
	yml := filepath.Join(dir, "logagg.yaml")
	conf := fmt.Sprintf("output:\n  path: %s\nforward:\n  kafka:\n    brokers: [%q]\n    topic: %s\n", output, brokers[0], fileTopic)
	if err := os.WriteFile(yml, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var errb syncBuffer
	if code := forwardCommand([]string{"--config", yml, "--topic", flagTopic, "--once"}, &errb); code != 0 {
		t.Fatalf("exit %d\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "shipping "+output) {
		t.Errorf("--from not taken from output.path:\n%s", errb.String())
	}
	got := consumeUntil(t, brokers, flagTopic, wantRange("cf", 1, 51), 20*time.Second)
	checkDelivered(t, wantRange("cf", 1, 51), got)
}
