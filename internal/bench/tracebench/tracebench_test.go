package tracebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipclab/logagg/internal/bench"
	"github.com/ipclab/logagg/internal/bench/latency"
	"github.com/ipclab/logagg/internal/testenv"
	"github.com/ipclab/logagg/internal/trace"
)

func TestMain(m *testing.M) {
	// The overhead study's latency rows re-execute this binary as their
	// echo side.
	if len(os.Args) > 1 && os.Args[1] == latency.EchoSubcommand {
		os.Exit(latency.EchoMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

func requireTracing(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "bpftrace")
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func options(t *testing.T, transports []string, probes ...Probe) Options {
	return Options{
		AggregatorBin: testenv.Binary(t, "aggregator"), ProducerBin: testenv.Binary(t, "producer"),
		Dir: testenv.ShortTempDir(t), Transports: transports, Sizes: []int{100}, Count: 1000, Rate: 4000, Probes: probes,
	}
}

// The seed's first question: which syscalls does a producer make? A
// producer that sent 1000 records one write each must show >= 1000 writes,
// and the row must survive the JSON round trip the report reads.
func TestProducerSyscallsUnixsock(t *testing.T) {
	requireTracing(t)
	res, err := Run(ctxT(t, 60*time.Second), options(t, []string{"unixsock"}, Probe{"producer_syscalls", TargetProducer}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || res.Rows[0].Records != 1000 {
		t.Fatalf("%d rows; want 1 with 1000 records: %+v", len(res.Rows), res.Rows)
	}
	b, err := json.Marshal(res.Rows)
	if err != nil {
		t.Fatal(err)
	}
	var rows []Row
	if err := json.Unmarshal(b, &rows); err != nil {
		t.Fatal(err)
	}
	r := rows[0]
	if r.Script != "producer_syscalls" || r.Side != TargetProducer || r.Transport != "unixsock" || len(r.PIDs) != 1 || r.PIDs[0] <= 0 {
		t.Fatalf("row identity: %+v", r)
	}
	if w := r.Syscall("write"); w < r.Records {
		t.Fatalf("producer made %d writes for %d records sent: %v", w, r.Records, r.Syscalls)
	}
	// The gate: the producer was traced from its execve, so its runtime
	// start-up (one execve, clone3 for its threads) is in the counts.
	if n := r.Syscall("execve"); n != 1 {
		t.Errorf("execve count %d, want 1 (traced from exec on)", n)
	}
	if tot := r.Count("@total", ""); tot != r.TotalSyscalls() {
		t.Errorf("@total %d != sum of @syscalls %d", tot, r.TotalSyscalls())
	}
}

// Seed 000's comparison over two transports: both sides are traced, both
// make syscalls per record, the categories add up, and the aggregator's
// receive calls are there (it was really its pid that was traced).
func TestCompareTwoTransports(t *testing.T) {
	requireTracing(t)
	o := options(t, []string{"unixsock", "udp"})
	o.Count = 500
	res, err := Run(ctxT(t, 90*time.Second), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 4 {
		t.Fatalf("%d rows, want 2 sides × 2 transports", len(res.Rows))
	}
	var rows []SyscallRow
	for _, r := range res.Rows {
		pr, err := PerRecord(r, 0)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, pr)
		if r.Side == TargetAggregator && r.Syscall("read")+r.Syscall("recvfrom")+r.Syscall("recvmsg")+r.Syscall("recvmmsg") == 0 {
			t.Errorf("%s: no receive syscalls on the aggregator side: %v", r.Transport, r.Syscalls)
		}
	}
	sides := map[string]bool{}
	for _, r := range rows {
		sides[r.Transport+"/"+string(r.Side)] = true
		if r.Total <= 0 || r.Runtime <= 0 || r.Transp <= 0 {
			t.Errorf("%s %s: per record total %.2f runtime %.2f transport %.2f, want all > 0", r.Transport, r.Side, r.Total, r.Runtime, r.Transp)
		}
		if math.Abs(r.Runtime+r.Transp+r.Other-r.Total) > 1e-9 {
			t.Errorf("%s %s: runtime %.4f + transport %.4f + other %.4f != total %.4f", r.Transport, r.Side, r.Runtime, r.Transp, r.Other, r.Total)
		}
		var sum int64
		for _, s := range r.Top {
			sum += s.Count
			if s.Category != trace.CategoryOf(s.Name) {
				t.Errorf("%s: category %s, want %s", s.Name, s.Category, trace.CategoryOf(s.Name))
			}
		}
		if sum != r.Syscalls {
			t.Errorf("%s %s: top (all) sums to %d, want %d", r.Transport, r.Side, sum, r.Syscalls)
		}
	}
	if len(sides) != 4 {
		t.Fatalf("sides %v, want producer and aggregator of two transports", sides)
	}
	if !slices.Contains(res.Notes, perRecordNote) {
		t.Errorf("notes lack the per-record note: %q", res.Notes)
	}
}

// Seed 002 in miniature: three runs, each with measurements; only the
// logging tracer logs, and it logs the echo's reads and writes.
func TestOverheadQuick(t *testing.T) {
	requireTracing(t)
	res, err := RunOverhead(ctxT(t, 90*time.Second), OverheadOptions{Transport: "tcp", Rate: 5000, Duration: 500 * time.Millisecond,
		Warmup: 100 * time.Millisecond, Quick: true, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	rows := res.Rows
	want := []string{"none", "idle/shared", "idle/other", "log/shared", "log/other"}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if r.State() != want[i] || r.Run != 1 || r.Latency.Error != "" || r.Latency.Measured <= 0 ||
			r.Latency.OneWay.Count != r.Latency.Measured || r.Latency.RoundTrip == nil {
			t.Fatalf("row %d: state %q run %d error %q measured %d", i, r.State(), r.Run, r.Latency.Error, r.Latency.Measured)
		}
		if r.WorkloadCPUNs <= 0 {
			t.Errorf("%s: workload CPU per message %.0f ns", r.State(), r.WorkloadCPUNs)
		}
		if r.Tracer == TracerLog {
			// Every measured message is one read and one write of the echo.
			if r.Events < r.Latency.Measured || r.LogBytes == 0 || r.EventsPerS <= 0 {
				t.Errorf("%s: %d events (%.0f/s), %d bytes for %d messages", r.State(), r.Events, r.EventsPerS, r.LogBytes, r.Latency.Measured)
			}
		} else if r.Events != 0 {
			t.Errorf("%s: %d events logged, want 0", r.State(), r.Events)
		}
		t.Logf("%s: 1w mean %s, tracer CPU %.0f%%, %.0f events/s, workload %.0f ns/msg", r.State(),
			bench.FormatNs(r.Latency.OneWay.Mean), 100*r.TracerCPU, r.EventsPerS, r.WorkloadCPUNs)
	}
	var out bytes.Buffer
	if err := WriteMedianRuns(&out, rows); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "Based on "); n != 5 {
		t.Errorf("%d seed tables, want 5:\n%s", n, out.String())
	}
	if d := OverheadDiffTable(rows); len(d.Rows) != 4 {
		t.Errorf("difference table has %d rows, want 4", len(d.Rows))
	}
}

// The summary over runs: the median run and the range, the difference
// from no tracer, and "beyond noise" only when every run is outside the
// no-tracer runs' range.
func TestSummarizeOverhead(t *testing.T) {
	row := func(tracer, placement string, run int, mean float64) OverheadRow {
		r := OverheadRow{Tracer: tracer, Placement: placement, Run: run}
		r.Latency.Measured = 20000
		r.Latency.OneWay = latency.Dist{Count: 20000, Mean: mean, P50: mean, P99: 2 * mean, P999: 3 * mean, Max: 4 * mean}
		return r
	}
	rows := []OverheadRow{
		row("none", "", 1, 30e3), row("log", "other", 1, 50e3), row("idle", "other", 1, 31e3),
		row("idle", "other", 2, 29e3), row("log", "other", 2, 40e3), row("none", "", 2, 35e3),
		row("none", "", 3, 32e3), row("log", "other", 3, 45e3), row("idle", "other", 3, 33e3),
	}
	st := SummarizeOverhead(rows)
	if len(st) != 3 || st[0].State != "none" || st[1].State != "log/other" {
		t.Fatalf("states %v", st)
	}
	if m := st[1].Figure("1w mean"); m.Median != 45e3 || m.Min != 40e3 || m.Max != 50e3 || st[1].MedianRun.Run != 3 {
		t.Errorf("log/other mean %+v, median run %d", m, st[1].MedianRun.Run)
	}
	d := OverheadDiffTable(rows)
	if len(d.Rows) != 2 {
		t.Fatalf("diff rows %v", d.Rows)
	}
	got := map[string][]string{}
	for _, r := range d.Rows {
		got[r[0]] = r
	}
	last := len(d.Header) - 1
	if g := got["log/other"]; g[1] != "+13.00µs" || g[last-1] != "1.41x" || g[last] != "yes" {
		t.Errorf("log/other: %v", g)
	}
	if g := got["idle/other"]; g[1] != "-1.00µs" || g[last] != "no" {
		t.Errorf("idle/other: %v", g)
	}
	// 20,000 per run support p99.9 (20 beyond it).
	if s := OverheadTable(rows).Rows[0]; !strings.Contains(strings.Join(s, "|"), "96.00µs (90.00µs–105.00µs)") {
		t.Errorf("summary row %v", s)
	}
}

func TestBadOptions(t *testing.T) {
	bins := Options{AggregatorBin: "a", ProducerBin: "p", Transports: []string{"tcp"}}
	for name, o := range map[string]Options{
		"no binaries":  {Transports: []string{"tcp"}},
		"no transport": {AggregatorBin: "a", ProducerBin: "p"},
		"negative":     {AggregatorBin: "a", ProducerBin: "p", Transports: []string{"tcp"}, Rate: -1},
		"bad size":     {AggregatorBin: "a", ProducerBin: "p", Transports: []string{"tcp"}, Sizes: []int{0}},
		"bad target":   {AggregatorBin: "a", ProducerBin: "p", Transports: []string{"tcp"}, Probes: []Probe{{"x", "kernel"}}},
	} {
		if _, err := Run(context.Background(), o); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: %v, want ErrBadSpec", name, err)
		}
	}
	if err := bins.Validate(); err != nil || !slices.Equal(bins.Probes, CompareProbes) || bins.Sizes[0] != 100 {
		t.Errorf("defaults: %v, %+v", err, bins)
	}
	if _, err := RunOverhead(context.Background(), OverheadOptions{Tracers: []string{"loud"}}); !errors.Is(err, ErrBadSpec) {
		t.Errorf("bad tracer: %v", err)
	}
	if _, err := ParseTarget("kernel"); !errors.Is(err, ErrBadSpec) {
		t.Errorf("bad target: %v", err)
	}
}

func TestDefaultTarget(t *testing.T) {
	for script, want := range map[string]Target{
		"producer_syscalls": TargetProducer, "aggregator_sched_latency": TargetAggregator,
		"recv_latency": TargetAggregator, "batch_write_fsync.bt": TargetAggregator, "skb_drops": TargetAll,
	} {
		if got := DefaultTarget(script); got != want {
			t.Errorf("%s: %s, want %s", script, got, want)
		}
	}
}

// Several producers' outputs are summed: counts add, equal buckets add,
// open-ended buckets keep their open end; the row's fields are typed and
// sorted (most frequent key first).
func TestMergeAndRow(t *testing.T) {
	a := &trace.Output{Maps: map[string]map[string]int64{"@syscalls": {"1": 3, "202": 2}, "@total": {"": 5}},
		Hists: map[string]map[string][]trace.Bucket{"@lat": {"write": {{Min: math.MinInt64, Max: -1, Count: 1}, {Min: 1, Max: 1, Count: 4}}}},
		Stats: map[string]map[string]trace.Stats{"@s": {"": {Count: 2, Total: 10, Average: 5}}}}
	b := &trace.Output{Maps: map[string]map[string]int64{"@syscalls": {"1": 1}, "@total": {"": 1}},
		Hists: map[string]map[string][]trace.Bucket{"@lat": {"write": {{Min: 1, Max: 1, Count: 1}, {Min: trace.TopBucketMin, Max: math.MaxInt64, Count: 2}}}},
		Stats: map[string]map[string]trace.Stats{"@s": {"": {Count: 2, Total: 30, Average: 15}}}}
	r := rowFrom(merge([]*trace.Output{a, b}))
	if want := []KeyCount{{"write", 4}, {"futex", 2}}; !slices.Equal(r.Syscalls, want) {
		t.Errorf("syscalls by name %v, want %v", r.Syscalls, want)
	}
	if len(r.Counts) != 1 || r.Count("@total", "") != 6 {
		t.Errorf("counts %+v: @syscalls belongs in Syscalls, @total should be 6", r.Counts)
	}
	if len(r.Hists) != 1 || r.Hists[0].Name != "@lat" || r.Hists[0].Key != "write" {
		t.Fatalf("hists %+v", r.Hists)
	}
	var labels []string
	for _, bk := range r.Hists[0].Buckets {
		labels = append(labels, fmt.Sprintf("%s=%d", bk.Label(), bk.Count))
	}
	if got := strings.Join(labels, " "); got != "(..., 0)=1 [1, 2)=5 [2G, ...)=2" {
		t.Errorf("merged buckets %s", got)
	}
	if !r.hasTopBucket() {
		t.Error("the [2G, ...) bucket is not noticed")
	}
	if len(r.Stats) != 1 || r.Stats[0].Count != 4 || r.Stats[0].Total != 40 || r.Stats[0].Average != 10 {
		t.Errorf("stats %+v", r.Stats)
	}
	pr, err := PerRecord(Row{Transport: "tcp", Side: TargetProducer, Records: 2, Syscalls: r.Syscalls}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// write (transport) 4, futex (runtime) 2 over 2 records.
	if pr.Total != 3 || pr.Transp != 2 || pr.Runtime != 1 || len(pr.Top) != 1 || pr.Top[0].Name != "write" {
		t.Errorf("per record %+v", pr)
	}
	if _, err := PerRecord(Row{Records: 0, Syscalls: r.Syscalls}, 0); !errors.Is(err, ErrNoSyscalls) {
		t.Errorf("zero records: %v", err)
	}
}

// syscallRow is a producer_syscalls row of a unit test.
func syscallRow(transport string, side Target, records int64, counts ...KeyCount) Row {
	return Row{Transport: transport, Size: 100, Script: "producer_syscalls", Side: side, Records: records, Syscalls: counts}
}

// The matrix puts syscalls in rows and transports in columns, per record,
// one per side; a syscall a transport never made is "-", keys are ordered
// by their largest value, and a total line closes it.
func TestTablesMatrix(t *testing.T) {
	rows := []Row{
		syscallRow("unixsock", TargetProducer, 100, KeyCount{"write", 100}, KeyCount{"futex", 10}),
		syscallRow("unixsock", TargetAggregator, 100, KeyCount{"read", 50}, KeyCount{"write", 2}),
		syscallRow("udp", TargetProducer, 200, KeyCount{"sendto", 200}, KeyCount{"futex", 4}),
		syscallRow("udp", TargetAggregator, 200, KeyCount{"recvmmsg", 20}, KeyCount{"write", 4}),
		{Transport: "udp", Size: 100, Script: "syscall_latency", Side: TargetProducer, Records: 200,
			Counts: []CountMap{{"@calls", []KeyCount{{"write", 200}}}},
			Hists:  []Hist{{"@lat_ns", "write", []Bucket{{1024, 2048, 150}, {2048, 4096, 48}, {trace.TopBucketMin, math.MaxInt64, 2}}}}},
	}
	tables := map[string]*bench.Table{}
	var titles []string
	for _, tt := range Tables(rows) {
		tables[tt.Title] = tt.Table
		titles = append(titles, tt.Title)
	}
	want := []string{TitleRuns, TitleCompare, MatrixTitle("syscalls", TargetAggregator), MatrixTitle("syscalls", TargetProducer),
		MatrixTitle("syscall_latency @calls", TargetProducer), TitleHists}
	if !slices.Equal(titles, want) {
		t.Fatalf("titles\n%s\nwant\n%s", strings.Join(titles, "\n"), strings.Join(want, "\n"))
	}
	agg := tables[MatrixTitle("syscalls", TargetAggregator)]
	if !slices.Equal(agg.Header, []string{"syscall", "cat", "unixsock", "udp"}) {
		t.Errorf("aggregator header %v", agg.Header)
	}
	got := map[string][]string{}
	var order []string
	for _, r := range agg.Rows {
		got[r[0]] = r[2:]
		order = append(order, r[0])
	}
	if !slices.Equal(order, []string{"read", "recvmmsg", "write", "total"}) {
		t.Errorf("aggregator rows %v, want by largest per record", order)
	}
	for key, cells := range map[string][]string{"read": {"0.50", "-"}, "recvmmsg": {"-", "0.10"}, "write": {"0.02", "0.02"}, "total": {"0.52", "0.12"}} {
		if !slices.Equal(got[key], cells) {
			t.Errorf("aggregator %s: %v, want %v", key, got[key], cells)
		}
	}
	// sendto and write tie at 1 per record: by name.
	if prod := tables[MatrixTitle("syscalls", TargetProducer)]; !slices.Equal(prod.Rows[1], []string{"write", "T", "1.00", "-"}) {
		t.Errorf("producer second row %v", prod.Rows[1])
	}
	h := tables[TitleHists].Rows[0]
	if h[6] != "200" || h[8] != "[1K, 2K)" || h[9] != "[2K, 4K)" || h[10] != "[2G, ...)" {
		t.Errorf("histogram row %v", h)
	}
	if Tables(nil) != nil {
		t.Error("tables of no rows")
	}
}

// Several sizes make one column per transport and size.
func TestMatrixColumnsBySize(t *testing.T) {
	a := syscallRow("tcp", TargetProducer, 10, KeyCount{"write", 10})
	b := a
	b.Size = 4096
	m := Matrices([]Row{a, b})
	if len(m) != 1 || !slices.Equal(m[0].Columns, []string{"tcp 100B", "tcp 4096B"}) {
		t.Fatalf("matrices %+v", m)
	}
}

// The overhead tables are the summary and the difference, titled with
// the workload.
func TestOverheadTables(t *testing.T) {
	r := OverheadRow{Tracer: TracerNone, Run: 1}
	r.Latency.Transport, r.Latency.Size, r.Latency.Rate = "tcp", 4096, 20000
	tt := OverheadTables([]OverheadRow{r})
	if len(tt) != 2 || !strings.HasPrefix(tt[0].Title, TitleOverheadSummary+": tcp, ") || tt[1].Title != TitleOverheadDiff {
		t.Fatalf("overhead tables %+v", tt)
	}
}

func TestBucketLabels(t *testing.T) {
	for _, c := range []struct {
		b    Bucket
		want string
	}{
		{Bucket{Lo: 2048, Hi: 4096}, "[2K, 4K)"},
		{Bucket{Lo: 1 << 20, Hi: 2 << 20}, "[1M, 2M)"},
		{Bucket{Lo: math.MinInt64, Hi: 0}, "(..., 0)"},
		{Bucket{Lo: 100, Hi: math.MaxInt64}, "[100, ...)"},
		{Bucket{Lo: 0, Hi: 1}, "[0, 1)"},
		{Bucket{Lo: trace.TopBucketMin, Hi: math.MaxInt64}, "[2G, ...)"},
	} {
		if got := c.b.Label(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.b, got, c.want)
		}
	}
}

// The params a trace result saves are the package's: compare or script
// from the probes, the options as validated; and an overhead study's come
// from its rows, with duration and warm-up only where they were asked for.
func TestParams(t *testing.T) {
	o := Options{AggregatorBin: "a", ProducerBin: "p", Transports: []string{"unixsock", "udp"}}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Params{Mode: ModeCompare, Script: "producer_syscalls", Target: "producer+aggregator",
		Transports: []string{"unixsock", "udp"}, Sizes: []int{100}, Count: 2000, Rate: 2000, Producers: 1}
	if got := o.params(); !reflect.DeepEqual(got, want) {
		t.Errorf("compare params\n got %+v\nwant %+v", got, want)
	}
	o.Probes = []Probe{{Script: "syscall_latency", Target: TargetProducer}}
	want.Mode, want.Script, want.Target = ModeScript, "syscall_latency", "producer"
	if got := o.params(); !reflect.DeepEqual(got, want) {
		t.Errorf("script params\n got %+v\nwant %+v", got, want)
	}

	asked := OverheadOptions{Duration: 2 * time.Second, Placements: []string{PlacementOther}}
	filled := asked
	if err := filled.fill(); err != nil {
		t.Fatal(err)
	}
	rows := []OverheadRow{{Run: 1, Latency: latency.Row{Transport: "unixsock", Size: 512, Rate: 1000}}, {Run: 2}}
	got := overheadParams(&asked, &filled, rows)
	wantOv := Params{Mode: ModeOverhead, Transports: []string{"unixsock"}, Sizes: []int{512}, Rate: 1000, Duration: "2s", Runs: 2,
		Placements: []string{PlacementOther}}
	if !reflect.DeepEqual(got, wantOv) {
		t.Errorf("overhead params\n got %+v\nwant %+v", got, wantOv)
	}
}
