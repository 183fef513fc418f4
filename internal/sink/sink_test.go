package sink_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ipclab/logagg/internal/metrics"
	"github.com/ipclab/logagg/internal/pipeline"
	"github.com/ipclab/logagg/internal/record"
	"github.com/ipclab/logagg/internal/rules"
	"github.com/ipclab/logagg/internal/sink"
	"github.com/ipclab/logagg/internal/transport/transporttest"
)

func counter(t *testing.T, cv *prometheus.CounterVec, lv ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := cv.WithLabelValues(lv...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

type marks struct{ got []uint64 }

func (m *marks) Written(mark uint64) { m.got = append(m.got, mark) }

func meta() *record.Meta {
	m := &record.Meta{Transport: "test", Listener: "test://"}
	m.Prepare()
	return m
}

func TestEmitBatchesAndCounts(t *testing.T) {
	capture := transporttest.NewCapture()
	m := metrics.New(nil)
	s := sink.New(capture, sink.Options{BatchBytes: 200})
	e := s.Emitter(m.ForListener("l"))
	done := &marks{}
	for i := range 10 {
		e.Received(11)
		if !e.Emit([]byte(`{"n":`+strings.Repeat("1", 4)+`}`), meta(), 0) {
			t.Fatalf("record %d refused", i)
		}
		e.Done(pipeline.Completion{To: done, Mark: uint64(i + 1)})
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	e.Release()
	if capture.Len() != 10 {
		t.Fatalf("captured %d records, want 10", capture.Len())
	}
	if capture.Batches() < 2 {
		t.Errorf("%d batches: a 200-byte batch size should have split ten records", capture.Batches())
	}
	// One completion per batch, the last mark of each, in order, the last
	// one covering everything.
	if n := len(done.got); n != int(capture.Batches()) || done.got[n-1] != 10 {
		t.Errorf("completions %v for %d batches", done.got, capture.Batches())
	}
	if got := counter(t, m.RecordsIn, "l"); got != 10 {
		t.Errorf("records_in = %v", got)
	}
	if got := counter(t, m.BytesIn, "l"); got != 110 {
		t.Errorf("bytes_in = %v", got)
	}
	if got := counter(t, m.Formats, "l", "json"); got != 10 {
		t.Errorf("records_by_format{json} = %v", got)
	}
}

// TestHardStopCountsRecordsAndBytes: the batch a hard stop refuses and
// every record after it are counted dropped, with their payload bytes, and
// records in = captured + dropped.
func TestHardStopCountsRecordsAndBytes(t *testing.T) {
	capture := transporttest.NewCapture()
	capture.Block()
	hard, stop := context.WithCancel(context.Background())
	stop()
	m := metrics.New(nil)
	e := sink.New(capture, sink.Options{HardStop: hard, BatchBytes: 1}).Emitter(m.ForListener("l"))
	payload := []byte("twelve bytes")
	accepted := 0
	for range 5 {
		if e.Emit(payload, meta(), 0) {
			accepted++
		}
	}
	if accepted != 1 {
		t.Errorf("%d records accepted; want only the first, before its batch met the hard stop", accepted)
	}
	if err := e.Flush(); err == nil {
		t.Fatal("Flush after the hard stop returned nil")
	}
	if e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done attached a completion after the hard stop")
	}
	e.Release()
	if got := counter(t, m.RecordsIn, "l"); got != 5 {
		t.Errorf("records_in = %v, want 5", got)
	}
	if got := counter(t, m.Dropped, "l", metrics.CauseDrainTimeout); got != 5 {
		t.Errorf("dropped = %v, want 5", got)
	}
	if got := counter(t, m.DroppedBytes, "l", metrics.CauseDrainTimeout); got != 5*float64(len(payload)) {
		t.Errorf("dropped_bytes = %v, want %d", got, 5*len(payload))
	}
	if capture.Len() != 0 {
		t.Errorf("captured %d", capture.Len())
	}
}

func TestDoneNeedsARecord(t *testing.T) {
	e := sink.New(transporttest.NewCapture(), sink.Options{}).Emitter(nil)
	if e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done attached to a batch without records")
	}
	e.Emit([]byte("x"), meta(), 0)
	if !e.Done(pipeline.Completion{To: &marks{}, Mark: 1}) {
		t.Error("Done refused after a record")
	}
}

func TestMessageFramesSequences(t *testing.T) {
	capture := transporttest.NewCapture()
	e := sink.New(capture, sink.Options{}).Emitter(nil)
	e.Message([]byte("\x1e{\"a\":1}\n\x1e{\"a\":2}\n"), 1<<10, false, meta())
	e.Message([]byte("one datagram\nwith two lines\n"), 1<<10, false, meta())
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	recs, err := capture.Records()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[2].Message != "one datagram\nwith two lines" {
		t.Errorf("records %+v", recs)
	}
}

// TestReleaseCountsWhatWasNotHandedOver: a source that ends without a
// final Flush loses nothing silently.
func TestReleaseCountsWhatWasNotHandedOver(t *testing.T) {
	m := metrics.New(nil)
	e := sink.New(transporttest.NewCapture(), sink.Options{}).Emitter(m.ForListener("l"))
	e.Emit([]byte("abc"), meta(), 0)
	e.Release()
	if got := counter(t, m.Dropped, "l", metrics.CauseDrainTimeout); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
}

// queue is an output's queue for tests: it keeps what it is given, can
// be full (TrySubmit refuses), and "writes" on demand (Write runs the
// completions, as the writer would).
type queue struct {
	mu      sync.Mutex
	full    bool
	batches []*pipeline.Batch
}

func (q *queue) NewBatch() *pipeline.Batch { return &pipeline.Batch{} }

func (q *queue) Submit(_ context.Context, b *pipeline.Batch) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if b.Records > 0 {
		q.batches = append(q.batches, b)
	}
	return nil
}

func (q *queue) TrySubmit(b *pipeline.Batch) bool {
	q.mu.Lock()
	full := q.full
	q.mu.Unlock()
	if full {
		return false
	}
	q.Submit(context.Background(), b)
	return true
}

// Write runs the completions of every batch submitted so far.
func (q *queue) Write() {
	q.mu.Lock()
	bs := q.batches
	q.batches = nil
	q.mu.Unlock()
	for _, b := range bs {
		for _, c := range b.Done {
			c.To.Written(c.Mark)
		}
	}
}

// lines are the lines of the batches submitted (before Write), and
// whether each batch counts for the listener.
func (q *queue) lines() (lines []string, counted []bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range q.batches {
		for _, l := range strings.Split(strings.TrimSuffix(string(b.Buf), "\n"), "\n") {
			lines = append(lines, l)
			counted = append(counted, b.Origin != nil)
		}
	}
	return lines, counted
}

func routed(t *testing.T, yamlRules string, outs ...*sink.Output) *sink.Sink {
	t.Helper()
	var specs []rules.Spec
	if err := yaml.Unmarshal([]byte(yamlRules), &specs); err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Name
	}
	set, err := rules.Compile(specs, names, names[0])
	if err != nil {
		t.Fatal(err)
	}
	return sink.NewRouted(sink.NewRouting(outs, set, nil), sink.Options{BatchBytes: 1 << 20})
}

func syslogLine(facSev string, msg string) []byte {
	return []byte("<" + facSev + ">Nov 26 21:03:52 app: " + msg)
}

// TestRoutingCountsARecordOnce: a record routed to two outputs is a record
// for the first (Origin set: it counts for its listener) and a copy for
// the second; one dropped by a rule is counted with its cause.
func TestRoutingCountsARecordOnce(t *testing.T) {
	qa, qb := &queue{}, &queue{}
	m := metrics.New(nil)
	s := routed(t, `
- {match: {app: app, message: {contains: both}}, route: [a, b]}
- {match: {message: {contains: drop}}, drop: true}
- {match: {message: {contains: only-b}}, route: [b]}
`, sink.NewOutput("a", qa, true, m.ForOutput("a")), sink.NewOutput("b", qb, true, m.ForOutput("b")))
	e := s.Emitter(m.ForListener("l"))
	for _, msg := range []string{"both 1", "drop 2", "only-b 3", "unrouted 4"} {
		e.Emit(syslogLine("13", msg), meta(), 0)
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	la, ca := qa.lines()
	lb, cb := qb.lines()
	if len(la) != 2 || !strings.Contains(la[0], "both 1") || !strings.Contains(la[1], "unrouted 4") || !ca[0] || !ca[1] {
		t.Errorf("a: %q %v", la, ca)
	}
	if len(lb) != 2 {
		t.Fatalf("b: %q", lb)
	}
	for i, l := range lb {
		wantCounted := strings.Contains(l, "only-b")
		if cb[i] != wantCounted {
			t.Errorf("b line %q counts for the listener: %v, want %v", l, cb[i], wantCounted)
		}
	}
	if got := counter(t, m.RecordsIn, "l"); got != 4 {
		t.Errorf("records_in %v", got)
	}
	if got := counter(t, m.Dropped, "l", metrics.CauseRule); got != 1 {
		t.Errorf("dropped{rule} %v", got)
	}
}

// TestDropWhenFullLeavesTheOthers: an output that drops when full loses
// its batch, counted for it (and for the listener when it was the record's
// first output), while the other output gets everything.
func TestDropWhenFullLeavesTheOthers(t *testing.T) {
	qa, qb := &queue{}, &queue{full: true}
	m := metrics.New(nil)
	s := routed(t, `[{route: [a, b]}, {match: {message: {contains: b-only}}, route: [b], stop: true}]`,
		sink.NewOutput("a", qa, true, m.ForOutput("a")), sink.NewOutput("b", qb, false, m.ForOutput("b")))
	e := s.Emitter(m.ForListener("l"))
	e.Emit(syslogLine("13", "to both"), meta(), 0)
	e.Emit(syslogLine("13", "b-only? no: the first rule routes it to a and b"), meta(), 0)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if la, _ := qa.lines(); len(la) != 2 {
		t.Errorf("a got %d records", len(la))
	}
	if got := counter(t, m.OutputDropped, "b", metrics.CauseOutputFull); got != 2 {
		t.Errorf("b output_full %v", got)
	}
	if got := counter(t, m.Dropped, "l", metrics.CauseOutputFull); got != 0 {
		t.Errorf("listener output_full %v: the records reached a, their first output", got)
	}
}

// TestCompletionsWaitForEveryOutput: an acknowledged source learns its
// mark only once every output holding its records wrote them, in order,
// and a hand-over whose records rules dropped completes after the ones
// before it.
func TestCompletionsWaitForEveryOutput(t *testing.T) {
	qa, qb := &queue{}, &queue{}
	s := routed(t, `[{match: {message: {contains: drop}}, drop: true}, {route: [a, b]}]`,
		sink.NewOutput("a", qa, true, nil), sink.NewOutput("b", qb, false, nil))
	e := s.Emitter(nil)
	done := &marks{}
	e.Emit(syslogLine("13", "one"), meta(), 0)
	e.Done(pipeline.Completion{To: done, Mark: 1})
	e.Flush()
	e.Emit(syslogLine("13", "drop two"), meta(), 0)
	if !e.Done(pipeline.Completion{To: done, Mark: 2}) {
		t.Fatal("Done refused after a dropped record")
	}
	e.Flush()
	if len(done.got) != 0 {
		t.Fatalf("completed %v before anything was written", done.got)
	}
	qa.Write()
	if len(done.got) != 0 {
		t.Fatalf("completed %v with b not written", done.got)
	}
	qb.Write()
	if fmt.Sprint(done.got) != "[1 2]" {
		t.Errorf("completions %v, want [1 2]", done.got)
	}
}

// TestRouteSwapsAtOnce: after Route, records go by the new rules; what an
// Emitter collected before goes to the old outputs; a removed output is
// retired and idle once its batches are handed over.
func TestRouteSwapsAtOnce(t *testing.T) {
	qa, qb := &queue{}, &queue{}
	a := sink.NewOutput("a", qa, true, nil)
	b := sink.NewOutput("b", qb, true, nil)
	s := sink.NewRouted(sink.NewRouting([]*sink.Output{a}, nil, nil), sink.Options{})
	e := s.Emitter(nil)
	e.Emit(syslogLine("13", "before"), meta(), 0)
	if a.Idle() {
		t.Error("a is idle while the Emitter holds a batch for it")
	}
	retired := s.Route(sink.NewRouting([]*sink.Output{b}, nil, nil))
	if len(retired) != 1 || retired[0] != a {
		t.Fatalf("retired %v", retired)
	}
	e.Emit(syslogLine("13", "after"), meta(), 0)
	e.Flush()
	la, _ := qa.lines()
	lb, _ := qb.lines()
	if len(la) != 1 || !strings.Contains(la[0], "before") || len(lb) != 1 || !strings.Contains(lb[0], "after") {
		t.Errorf("a %q, b %q", la, lb)
	}
	if !a.Idle() {
		t.Error("a still held after the hand-over")
	}
}

// TestRateLimitNotice: the record that comes after a suppression carries,
// before it, one record saying how many were suppressed.
func TestRateLimitNotice(t *testing.T) {
	q := &queue{}
	m := metrics.New(nil)
	s := routed(t, `[{name: flood, rate_limit: {key: app, burst: 2, interval: 50ms}, route: [a]}]`, sink.NewOutput("a", q, true, nil))
	e := s.Emitter(m.ForListener("l"))
	for i := range 5 {
		e.Emit(syslogLine("13", fmt.Sprint("burst ", i)), meta(), 0)
	}
	time.Sleep(60 * time.Millisecond) // the rate limit's interval is what is tested
	e.Emit(syslogLine("13", "after"), meta(), 0)
	e.Flush()
	lines, _ := q.lines()
	if len(lines) != 4 || !strings.Contains(lines[2], `"event":"rate_limit"`) || !strings.Contains(lines[2], `"suppressed":3`) ||
		!strings.Contains(lines[2], `"value":"app"`) {
		t.Errorf("lines:\n%s", strings.Join(lines, "\n"))
	}
	in, out := counter(t, m.RecordsIn, "l"), float64(len(lines))
	if dropped := counter(t, m.Dropped, "l", metrics.CauseRateLimit); in != out+dropped {
		t.Errorf("in %v != out %v + rate-limited %v", in, out, dropped)
	}
}

// TestEmitAllocatesNothing: with no rules, and with Debian's rules over
// several outputs, a record costs no allocation once batches have grown.
func TestEmitAllocatesNothing(t *testing.T) {
	q := &queue{}
	plain := sink.New(q, sink.Options{BatchBytes: 1 << 30})
	qs := []*queue{{}, {}, {}}
	withRules := routed(t, `
- {match: {selector: "*.*;auth,authpriv.none"}, route: [syslog]}
- {match: {selector: "auth,authpriv.*"}, route: [auth]}
- {match: {selector: "user.*"}, route: [user]}
`, sink.NewOutput("syslog", qs[0], true, nil), sink.NewOutput("auth", qs[1], true, nil), sink.NewOutput("user", qs[2], true, nil))
	for name, s := range map[string]*sink.Sink{"no rules": plain, "rules": withRules} {
		e := s.Emitter(nil)
		m := meta()
		p := syslogLine("13", "a line that goes to syslog and user")
		for range 1000 {
			e.Emit(p, m, 0)
		}
		if n := testing.AllocsPerRun(1000, func() { e.Emit(p, m, 0) }); n != 0 {
			t.Errorf("%s: %v allocations per record", name, n)
		}
	}
}

// TestRouteToFewerRules: the rules' counts of the old routing are counted
// for its rules, and a routing with fewer rules takes over cleanly.
func TestRouteToFewerRules(t *testing.T) {
	q := &queue{}
	m := metrics.New(nil)
	s := routed(t, `[{name: one, route: [a]}, {name: two, route: [a]}]`, sink.NewOutput("a", q, true, nil))
	a := s.Routing().Outputs[0]
	e := s.Emitter(nil)
	e.Emit(syslogLine("13", "x"), meta(), 0)
	set, _ := rules.Compile(nil, []string{"a"}, "a")
	s.Route(sink.NewRouting([]*sink.Output{a}, set, m))
	e.Emit(syslogLine("13", "y"), meta(), 0)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if lines, _ := q.lines(); len(lines) != 2 {
		t.Errorf("%d records", len(lines))
	}
}
