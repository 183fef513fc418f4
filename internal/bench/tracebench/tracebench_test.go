package tracebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
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

func spec(t *testing.T, transport string, probes ...Probe) Spec {
	return Spec{
		AggregatorBin: testenv.Binary(t, "aggregator"), ProducerBin: testenv.Binary(t, "producer"),
		Dir: testenv.ShortTempDir(t), Transport: transport, Size: 100, Count: 1000, Rate: 4000, Probes: probes,
	}
}

// The seed's first question: which syscalls does a producer make? A
// producer that sent 1000 records one write each must show >= 1000 writes,
// and the row must survive the JSON round trip the report reads.
func TestProducerSyscallsUnixsock(t *testing.T) {
	requireTracing(t)
	res, err := Run(ctxT(t, 60*time.Second), spec(t, "unixsock", Probe{"producer_syscalls", TargetProducer}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 1000 || len(res.Rows) != 1 {
		t.Fatalf("sent %d, %d rows; want 1000 and 1", res.Sent, len(res.Rows))
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
	if r.Script != "producer_syscalls" || r.Target != TargetProducer || r.Transport != "unixsock" || len(r.PIDs) != 1 || r.PIDs[0] <= 0 {
		t.Fatalf("row identity: %+v", r)
	}
	if w := r.Maps["@syscalls"]["write"]; w < r.Records {
		t.Fatalf("producer made %d writes for %d records sent: %v", w, r.Records, r.Maps["@syscalls"])
	}
	// The gate: the producer was traced from its execve, so its runtime
	// start-up (one execve, clone3 for its threads) is in the counts.
	if r.Maps["@syscalls"]["execve"] != 1 {
		t.Errorf("execve count %d, want 1 (traced from exec on)", r.Maps["@syscalls"]["execve"])
	}
	if tot := r.Maps["@total"][""]; tot != r.Total("@syscalls") {
		t.Errorf("@total %d != sum of @syscalls %d", tot, r.Total("@syscalls"))
	}
	var tab bytes.Buffer
	if _, err := Table(rows).WriteTo(&tab); err != nil || !strings.Contains(tab.String(), "write") {
		t.Errorf("table: %v\n%s", err, tab.String())
	}
}

// Seed 000's comparison over two transports: both sides are traced, both
// make syscalls per record, the categories add up, and the aggregator's
// receive calls are there (it was really its pid that was traced).
func TestCompareTwoTransports(t *testing.T) {
	requireTracing(t)
	ctx := ctxT(t, 90*time.Second)
	var rows []SyscallRow
	for _, tr := range []string{"unixsock", "udp"} {
		s := spec(t, tr, CompareProbes...)
		s.Count = 500
		res, err := Run(ctx, s)
		if err != nil {
			t.Fatalf("%s: %v", tr, err)
		}
		if len(res.Rows) != 2 {
			t.Fatalf("%s: %d rows, want 2", tr, len(res.Rows))
		}
		for _, r := range res.Rows {
			pr, err := PerRecord(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			rows = append(rows, pr)
		}
		agg := res.Rows[1].Maps["@syscalls"]
		if agg["read"]+agg["recvfrom"]+agg["recvmsg"]+agg["recvmmsg"] == 0 {
			t.Errorf("%s: no receive syscalls on the aggregator side: %v", tr, agg)
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
	var tab bytes.Buffer
	if _, err := CompareTable(rows).WriteTo(&tab); err != nil || !strings.Contains(tab.String(), "aggregator") {
		t.Errorf("table: %v\n%s", err, tab.String())
	}
}

// Seed 002 in miniature: three runs, each with measurements; only the
// logging tracer logs, and it logs the echo's reads and writes.
func TestOverheadQuick(t *testing.T) {
	requireTracing(t)
	rows, err := Overhead(ctxT(t, 90*time.Second), OverheadSpec{Transport: "tcp", Rate: 5000, Duration: 500 * time.Millisecond,
		Warmup: 100 * time.Millisecond, Quick: true, Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
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
	if err := WriteOverhead(&out, rows); err != nil {
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

func TestBadSpec(t *testing.T) {
	for name, s := range map[string]Spec{
		"no binaries": {Transport: "tcp", Probes: CompareProbes},
		"no probes":   {AggregatorBin: "a", ProducerBin: "p", Transport: "tcp"},
		"negative":    {AggregatorBin: "a", ProducerBin: "p", Transport: "tcp", Rate: -1, Probes: CompareProbes},
	} {
		if _, err := Run(context.Background(), s); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: %v, want ErrBadSpec", name, err)
		}
	}
	if _, err := Overhead(context.Background(), OverheadSpec{Tracers: []string{"loud"}}); !errors.Is(err, ErrBadSpec) {
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
// open-ended buckets keep their open end.
func TestMergeAndRow(t *testing.T) {
	a := &trace.Output{Maps: map[string]map[string]int64{"@syscalls": {"1": 3, "202": 2}},
		Hists: map[string]map[string][]trace.Bucket{"@lat": {"write": {{Min: math.MinInt64, Max: 0, Count: 1}, {Min: 1, Max: 1, Count: 4}}}},
		Stats: map[string]map[string]trace.Stats{"@s": {"": {Count: 2, Total: 10, Average: 5}}}}
	b := &trace.Output{Maps: map[string]map[string]int64{"@syscalls": {"1": 1}},
		Hists: map[string]map[string][]trace.Bucket{"@lat": {"write": {{Min: 1, Max: 1, Count: 1}, {Min: 100, Max: math.MaxInt64, Count: 2}}}},
		Stats: map[string]map[string]trace.Stats{"@s": {"": {Count: 2, Total: 30, Average: 15}}}}
	r := rowFrom(merge([]*trace.Output{a, b}))
	if r.Maps["@syscalls"]["write"] != 4 || r.Maps["@syscalls"]["futex"] != 2 {
		t.Errorf("syscalls by name: %v", r.Maps["@syscalls"])
	}
	h := r.Hists["@lat"]["write"]
	if len(h) != 3 || h[0].Min != nil || h[0].Count != 1 || h[1].Count != 5 || h[2].Max != nil || *h[2].Min != 100 {
		b, _ := json.Marshal(h)
		t.Errorf("merged buckets %s", b)
	}
	if st := r.Stats["@s"][""]; st.Count != 4 || st.Total != 40 || st.Average != 10 {
		t.Errorf("stats %+v", st)
	}
	pr, err := PerRecord(Row{Transport: "tcp", Target: TargetProducer, Records: 2, Maps: r.Maps}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// write (transport) 4, futex (runtime) 2 over 2 records.
	if pr.Total != 3 || pr.Transp != 2 || pr.Runtime != 1 || len(pr.Top) != 1 || pr.Top[0].Name != "write" {
		t.Errorf("per record %+v", pr)
	}
	if _, err := PerRecord(Row{Records: 0, Maps: r.Maps}, 0); !errors.Is(err, ErrNoSyscalls) {
		t.Errorf("zero records: %v", err)
	}
}
